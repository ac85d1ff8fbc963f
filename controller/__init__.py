"""incastlab: controller stage."""
