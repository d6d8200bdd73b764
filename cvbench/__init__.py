"""cvbench: train, evaluate and benchmark convolutional networks with Keras 3."""

__version__ = "0.1.0"

__all__ = ["__version__"]
