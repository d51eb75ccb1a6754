"""Embedding bags: the ``Loop`` forms recognised at load (``loops.py``), the Gather/Reduce forms
recognised at opt level 2 (``recognise.py``) and sparse graph inputs (``sparse_feeds.py``)."""
