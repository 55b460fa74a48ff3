"""Process roles of pantheon-serve: supervisor, die workers, HTTP fronts, and the glue between them."""
