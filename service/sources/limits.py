"""Limits on what one pushed request or message may hold, shared by the HTTP, OTLP and
Forward sources (``SECURITY.md`` lists them with the rest)."""

# The longest tag a kubelet path can give: "kube.var.log.containers." + pod (253) + "_" +
# namespace (63) + "_" + container (63) + "-" + container id (64) + ".log" = 474 characters.
MAX_TAG = 512
MAX_RECORDS = 100_000  # records one body may expand to (a Fluent Bit chunk holds far fewer)
# JSON objects and arrays one body may hold, counted as its "{" and "[" bytes before it is
# decoded (an upper bound: brackets inside strings count too); `{}` is 2 bytes as sent and
# about 64 parsed, so this bounds what decoding may build (100,000 Fluent Bit records with
# their Kubernetes metadata hold about 600,000)
MAX_CONTAINERS = 1_000_000
# protobuf fields one OTLP export may hold (its pre-scan walks each once)
MAX_FIELDS = 1_000_000
