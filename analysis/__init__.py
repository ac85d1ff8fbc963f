"""incastlab: analysis stage."""
