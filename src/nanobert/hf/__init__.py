"""How does a model travel to and from transformers? The explicit name map, export and import."""
