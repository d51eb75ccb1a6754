"""Graph passes by opt level (``pipeline.py``): folding, fusion, products, sparse weights, and
the embedding-bag recognisers together in ``bags/``."""
