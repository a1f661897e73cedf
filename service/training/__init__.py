"""The text model's lifecycle outside the service: fit it, score the classifier, export
feedback for retraining. Only the CLI imports this package (``vllm-sentinel train``,
``evaluate``, ``feedback-export``), each command just the module it runs; fitting needs
scikit-learn (the ``[train]`` extra), imported where it is used.

- :mod:`.fit` — ``train()``: examples to a verified artifact, manifest, card and pin.
- :mod:`.examples` — loading examples, the held-out guard, leakage-free groups.
- :mod:`.recipe` — the scikit-learn pipeline and its settings.
- :mod:`.crossval` — grouped cross-validation; :mod:`.thresholds` — abstain thresholds;
  :mod:`.scores` — scores with abstention.
- :mod:`.export` — the pipeline to plain arrays and artifact bytes, checked.
- :mod:`.card` — ``MODEL_CARD.md``; :mod:`.pin` — the package's pin of the shipped model.
- :mod:`.evaluate` — ``vllm-sentinel evaluate``: the whole classifier on labelled logs.
- :mod:`.feedback` — ``vllm-sentinel feedback-export``: the store's feedback as corrections.
"""
