// gen.js writes configs.json: small tokenizer.json files that use the parts
// of the format beyond the Llama families, with what HF tokenizers gives
// for some texts. The Go tests check the package against it.
//
//   npm install --ignore-scripts tokenizers@0.23.2
//   NODE_PATH=node_modules node gen.js > configs.json
const { Tokenizer } = require('tokenizers');
const fs = require('fs');
const os = require('os');
const path = require('path');

// The byte-level alphabet.
const bs = [];
for (let b = 33; b <= 126; b++) bs.push(b);
for (let b = 161; b <= 172; b++) bs.push(b);
for (let b = 174; b <= 255; b++) bs.push(b);
const cs = bs.slice();
let n = 0;
for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; }
const byteChars = bs.map((b, i) => [b, String.fromCodePoint(cs[i])]).sort((x, y) => x[0] - y[0]).map(x => x[1]);

function vocabOf(tokens) {
  const v = {};
  tokens.forEach((t, i) => { v[t] = i; });
  return v;
}

// bpe returns a BPE model whose vocabulary is base plus the results of merges.
function bpe(base, merges, extra = {}) {
  const tokens = base.slice();
  for (const m of merges) {
    const [a, b] = Array.isArray(m) ? m : m.split(' ');
    const prefix = extra.continuing_subword_prefix || '';
    const t = a + (prefix && b.startsWith(prefix) ? b.slice(prefix.length) : b);
    if (!tokens.includes(t)) tokens.push(t);
  }
  return Object.assign({ type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
    end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, vocab: vocabOf(tokens), merges }, extra);
}

function added(id, content, opts = {}) {
  return Object.assign({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }, opts);
}

const letters = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,!?-_\'"\n\t'.split('');
const texts = ['', ' ', 'hello world', 'Hello, World!', '  two  spaces  ', 'a-b-c', 'x1y22z333',
  'hello<mask>world', 'hello <mask> world', 'say hello, hellos', 'the cat\n\nsat', 'don\'t stop', 'naïve café',
  '<|endoftext|>the end', 'tab\tand\nnewline', 'a  b   c', '--x--', '12 34', 'ab ab', 'über'];

const configs = [];
function add(name, tok) {
  configs.push({ name, tokenizer: Object.assign({ version: '1.0', truncation: null, padding: null,
    added_tokens: [], normalizer: null, pre_tokenizer: null, post_processor: null, decoder: null }, tok) });
}

const gpt2Merges = ['Ġ t', 'h e', 'Ġt he', 'Ġ c', 'a t', 'Ġc at', 'l l', 'e ll', 'h ell', 'hell o', 'Ġ w', 'o r', 'Ġw or', 'l d', 'Ġwor ld', 'Ġ Ġ'];
add('bytelevel-gpt2', {
  added_tokens: [added(300, '<|endoftext|>'), added(301, 'hello', { special: false, normalized: true })],
  pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
  post_processor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
  decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: bpe(byteChars, gpt2Merges),
});
add('bytelevel-prefix-roberta', {
  added_tokens: [added(300, '<s>'), added(301, '</s>'), added(302, '<mask>', { lstrip: true })],
  pre_tokenizer: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
  post_processor: { type: 'RobertaProcessing', sep: ['</s>', 301], cls: ['<s>', 300], trim_offsets: true, add_prefix_space: true },
  decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: bpe(byteChars, gpt2Merges),
});
add('metaspace-first', {
  added_tokens: [added(0, '<unk>'), added(1, '<s>'), added(2, '</s>')],
  pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: false },
  post_processor: { type: 'TemplateProcessing', single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
    pair: [], special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } } },
  decoder: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: false },
  model: bpe(['<unk>', '<s>', '</s>', '▁', ...letters], ['▁ h', 'e l', 'l o', '▁h el', '▁hel lo', '▁ w', 'o r', '▁w or', 'l d', '▁wor ld'],
    { unk_token: '<unk>', fuse_unk: true }),
});
add('metaspace-always-split', {
  added_tokens: [added(0, '<unk>'), added(1, '<mask>', { rstrip: true })],
  pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: true },
  decoder: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: true },
  model: bpe(['<unk>', '▁', ...letters], ['▁ h', 'e l', 'l o', '▁h el', '▁hel lo', '▁ w', 'o r', '▁w or', 'l d', '▁wor ld', '▁ ▁'],
    { unk_token: '<unk>', fuse_unk: false }),
});
add('split-behaviors', {
  added_tokens: [added(0, '<unk>'), added(1, 'hello', { special: false, normalized: true, single_word: true })],
  normalizer: { type: 'Sequence', normalizers: [
    { type: 'Strip', strip_left: true, strip_right: true },
    { type: 'Replace', pattern: { Regex: ' {2,}' }, content: ' ' },
  ] },
  pre_tokenizer: { type: 'Sequence', pretokenizers: [
    { type: 'Split', pattern: { String: ' ' }, behavior: 'MergedWithNext', invert: false },
    { type: 'Split', pattern: { Regex: '[0-9]' }, behavior: 'Contiguous', invert: false },
    { type: 'Split', pattern: { String: '-' }, behavior: 'MergedWithPrevious', invert: false },
    { type: 'Split', pattern: { Regex: '[,!]' }, behavior: 'Removed', invert: false },
  ] },
  decoder: { type: 'Sequence', decoders: [{ type: 'Fuse' }, { type: 'Strip', content: 'h', start: 2, stop: 0 }] },
  model: bpe(['<unk>', ...letters], [['h', 'e'], ['l', 'l'], ['he', 'll'], ['hell', 'o'], [' ', 'w'], ['o', 'r'], [' w', 'or'], ['l', 'd'], [' wor', 'ld']], { unk_token: '<unk>' }),
});
add('split-invert-suffix', {
  added_tokens: [added(0, '<unk>')],
  pre_tokenizer: { type: 'Split', pattern: { Regex: '\\w+' }, behavior: 'Removed', invert: true },
  decoder: { type: 'Sequence', decoders: [
    { type: 'Replace', pattern: { String: '</w>' }, content: ' ' },
    { type: 'Replace', pattern: { Regex: '#+' }, content: '' },
  ] },
  model: bpe(['<unk>', ...letters.map(c => c + '</w>'), ...letters, ...letters.map(c => '##' + c), ...letters.map(c => '##' + c + '</w>')],
    [['h', '##e'], ['##l', '##l'], ['he', '##ll'], ['hell', '##o</w>'], ['c', '##a'], ['ca', '##t</w>']],
    { unk_token: '<unk>', continuing_subword_prefix: '##', end_of_word_suffix: '</w>' }),
});
add('bert-template', {
  added_tokens: [added(0, '<unk>'), added(1, '[CLS]'), added(2, '[SEP]')],
  pre_tokenizer: { type: 'Split', pattern: { Regex: '\\s+' }, behavior: 'Isolated', invert: false },
  post_processor: { type: 'Sequence', processors: [
    { type: 'BertProcessing', sep: ['[SEP]', 2], cls: ['[CLS]', 1] },
    { type: 'TemplateProcessing', single: [{ SpecialToken: { id: '[CLS]', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '[SEP]', type_id: 0 } }],
      pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens: { '[CLS]': { id: '[CLS]', ids: [1], tokens: ['[CLS]'] }, '[SEP]': { id: '[SEP]', ids: [2], tokens: ['[SEP]'] } } },
  ] },
  model: bpe(['<unk>', '[CLS]', '[SEP]', ...letters], ['h e', 'l l', 'he ll', 'hell o'], { unk_token: '<unk>', ignore_merges: true }),
});

(async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gen-'));
  for (const c of configs) {
    const file = path.join(dir, c.name + '.json');
    fs.writeFileSync(file, JSON.stringify(c.tokenizer));
    const tok = Tokenizer.fromFile(file);
    c.cases = [];
    for (const text of texts) {
      const plain = await tok.encode(text, null, { addSpecialTokens: false });
      const special = await tok.encode(text, null, { addSpecialTokens: true });
      const ids = plain.getIds();
      c.cases.push({ text, ids, ids_with_special: special.getIds(), decoded: await tok.decode(ids, false),
        decoded_skip_special: await tok.decode(special.getIds(), true) });
    }
  }
  console.log(JSON.stringify(configs, null, 1));
})();
