"""Example observation scripts; run them with ``python -m vdifrec.examples.observe`` or
``python -m vdifrec.examples.monitor`` (``--help`` lists the options)."""
