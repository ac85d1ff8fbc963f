"""incastlab: topologies stage."""
