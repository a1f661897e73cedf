"""Limits on what one pushed request or message may hold, shared by the HTTP, OTLP and
Forward sources (``SECURITY.md`` lists them with the rest)."""

# The longest tag a kubelet path can give: "kube.var.log.containers." + pod (253) + "_" +
# namespace (63) + "_" + container (63) + "-" + container id (64) + ".log" = 474 characters.
MAX_TAG = 512
MAX_RECORDS = 100_000  # records one body may expand to (a Fluent Bit chunk holds far fewer)
