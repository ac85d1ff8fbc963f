"""incastlab: workloads stage."""
