"""Synthetic-data methods: Fedssyn (per-client generators, synthetic-data shuffling) and its generators."""
