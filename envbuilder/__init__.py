"""envbuilder: certify which SGLang x flash-attn-4 x CUDA x driver combinations serve your model."""

__version__ = "0.1.0"
