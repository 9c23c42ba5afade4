"""shufflefl.fl: the torch federated-learning engine, algorithms, data layer and synthetic-data methods."""
