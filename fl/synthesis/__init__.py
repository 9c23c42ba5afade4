"""Synthetic-data methods: Fedssyn (per-client generators, synthetic-data shuffling) and its generators; packing
the synthetic sets made on one machine for reuse on another (``python -m fl.synthesis pack|unpack``)."""
