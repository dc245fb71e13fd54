"""Playing dialogues: resumably, pausing, forking counterfactual branches, first contact with endpoints, the store's
writer."""
