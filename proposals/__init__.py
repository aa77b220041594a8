"""proposals: the six rules that propose grounded, minimally contrastive negatives."""
