"""shufflefl.sims: numpy simulators of the Fedssyn theory (least squares, Sec. 2.3; MNIST softmax, appendix B)."""
