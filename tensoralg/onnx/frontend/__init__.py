"""The front end: reading and checking a model, the importer's graph, load-time decisions
(``If``s decided by shapes or constants), errors and the ``tensoralg onnx`` command."""
