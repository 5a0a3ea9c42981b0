"""pd2bw-torch: pd2bw's bridge to PyTorch (profile a PyTorch model; run a pd2bw plan with
torch.distributed.pipelining). Entry point: ``python -m pd2bw_torch <command>`` (tools/pd2bw-torch)."""

__version__ = "0.1.0"
