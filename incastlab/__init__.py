"""incastlab: incastlab stage."""
