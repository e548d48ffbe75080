"""Build the optional C scanner; everything else is configured in pyproject.toml.

``optional=True``: without a working C compiler the install still succeeds and traceflow uses its
pure-Python parser (see traceflow/native.py).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "traceflow._cscan",
            sources=["traceflow/_cscan.c"],
            extra_compile_args=["-O2", "-std=c11", "-D_GNU_SOURCE"],
            optional=True,
        )
    ]
)
