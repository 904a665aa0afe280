"""migfit: make NVIDIA MIG GPUs schedulable by memory on Kubernetes."""

__version__ = "0.1.0"
