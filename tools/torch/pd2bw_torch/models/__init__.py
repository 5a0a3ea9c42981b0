"""PyTorch versions of the models pd2bw trains, split into pd2bw's layer lists."""
