"""HuggingFace model directories: config.json, safetensors weights (zero-copy), tokenizer files."""
