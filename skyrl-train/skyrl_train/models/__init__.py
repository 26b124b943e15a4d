"""Models: HF loading, LoRA, the embedded char tokenizer and tiny Qwen model."""
