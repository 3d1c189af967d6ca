// Package data turns text corpora into training batches: it reads
// documents (Reader), tokenizes them into a dataset folder (Prepare,
// CreateStore), opens and verifies the folder (OpenStore), reports on it
// (Inspect) and serves deterministic, shardable, resumable batches from it
// (Loader).
//
// # Inputs
//
// A Reader reads JSON Lines (a string field, "text" by default, or a list
// of token ids, "input_ids", when pre-tokenized), Parquet (a string column,
// or a list of INT32 or INT64, streamed row group by row group and page by
// page) and plain UTF-8 text (a document per file, or per blank-line
// separated paragraph). Records that do not make a document (invalid JSON,
// a missing field, a wrong type, null, invalid UTF-8, empty text, token ids
// outside the vocabulary, over-long lines) are skipped and counted in a
// Problems report with their file and line (or Parquet row); in strict mode
// the first one is an error.
//
// With ReadOptions.Chat, JSONL lines and Parquet rows are chat records
// (ParseChatRecord: "messages", or alpaca "instruction"/"input"/"output"),
// which Prepare renders with a ChatTemplate (the checkpoint's
// chat_template, or the built-in Llama 2 and Llama 3 formats) into a
// document and its loss mask, 1 on the assistant turns' tokens.
//
// # Dataset folder
//
// A dataset is a folder of three files (four for a chat dataset), written
// into a temporary folder, synced and renamed into place:
//
// tokens.bin is a 64-byte header and then the tokens of every document, in
// input order, as little-endian uint32:
//
//	offset size field
//	0      8    magic "MTTOKENS"
//	8      4    version (1)
//	12     4    dtype (1: uint32)
//	16     4    header size (64)
//	20     4    bytes per token (4)
//	24     8    tokens
//	32     8    documents
//	40     24   zero
//
// index.bin is a 64-byte header and one 32-byte record per document:
//
//	offset size field            record: offset size field
//	0      8    magic "MTINDEX\0"        0      8    first token (in tokens)
//	8      4    version (1)              8      4    tokens
//	12     4    record size (32)         12     4    source (index in the manifest)
//	16     4    header size (64)         16     8    line (or Parquet row)
//	20     4    zero                     24     1    split (0 train, 1 holdout)
//	24     8    documents                25     7    zero
//	32     8    tokens
//	40     24   zero
//
// mask.bin, only in a chat dataset (Settings.Chat, manifest version 2), is
// a 64-byte header and then one byte per token of tokens.bin, 1 where the
// token is a target of the loss (an assistant turn's) and 0 where it is not
// (the prompt); a target's weight is its byte:
//
//	offset size field
//	0      8    magic "MTMASK\0\0"
//	8      4    version (1)
//	12     4    zero
//	16     4    header size (64)
//	20     4    zero
//	24     8    tokens
//	32     32   zero
//
// manifest.json is a Manifest: the format and version, the tokenizer (the
// SHA-256 of its tokenizer.json, vocabulary size, BOS and EOS), the
// settings (mode, seq_len, bos, eos, pad_id, holdout, seed and how the
// inputs were read), the counts of documents, tokens, sequences, targets,
// padding and truncation for the whole and for each split, with each
// split's document ids as ranges, the sources (path, format, bytes, SHA-256,
// documents, problems), the size and SHA-256 of tokens.bin and index.bin,
// and the problems met in reading. Its version is 1 (StoreVersion), or 2
// (MaskedVersion) for a chat dataset, whose settings.chat names the
// template, whose counts.masked counts the targets the mask excludes and
// whose files list mask.bin.
//
// Documents hold their BOS and EOS tokens (Settings.BOS, Settings.EOS). The
// split of a document is a seeded hash of its content (Settings.Holdout).
// Sequences are not stored: they follow from the index and the mode (see
// ModePack and ModeDocument), so the token file does not depend on them.
//
// # Batches
//
// A Loader reads a split's sequences as a stream of epochs, shuffled by
// (seed, epoch), cuts it into global batches, gives each rank its block,
// and resumes exactly from a Position. Its Batch maps field for field onto
// the engine's llama.Batch: IDs, Targets and Weights, B×T row-major, with
// weight 0 on padding.
package data
