"""sglforge: pinned upstreams + patch series -> reproducible CUDA 13 wheels for sm_120a."""

__version__ = "0.1.0"
