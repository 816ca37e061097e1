"""What is recorded and selected: streams, segments (one recording at one site, versioned)
and slices (immutable selections of segment versions)."""
