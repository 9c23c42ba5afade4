"""Templates for your own method, algorithm and data (see README, "Your own method, algorithm, model or data")."""
