"""Values as bytes and back: numeric records (npy, msgpack) and images (JPEG, PNG)."""
