"""The least-squares simulator of Fedssyn Fig. 2 (``python -m sims.quadratic``): the problem, FedAvg on it, the fit
of A_p and the figure's scatter."""
