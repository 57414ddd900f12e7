"""Model folders: the tiny model and tokenizer, loading and saving an HF folder, the pretrained conversion.
A leaf: it imports only config."""
