package tokenizer

// Names of a HuggingFace tokenizer's files, as a model folder carries them.
const (
	FileName       = "tokenizer.json"        // the tokenizer itself: Load and Parse read it
	ConfigFileName = "tokenizer_config.json" // names the BOS and EOS tokens
)

// Files are the tokenizer-related files a model folder may carry beside its
// weights, which a checkpoint derived from it copies: tokenizer.json,
// tokenizer_config.json, special_tokens_map.json and generation_config.json
// (the BOS and EOS ids of generation). Only the first two are read here.
var Files = []string{FileName, ConfigFileName, "special_tokens_map.json", "generation_config.json"}
