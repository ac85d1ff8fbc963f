"""incastlab: capture stage."""
