// generate.mjs loads a GGUF file with llama.cpp (node-llama-cpp's prebuilt
// CPU binaries, never a build or a download) and prints, as one JSON object,
// the metadata llama.cpp read, its tensors, and the greedy continuation
// (temperature 0: the most likely token at every step, no sampling, no
// repeat penalty) of each prompt given as token ids. memtrain's GGUF export
// test (checkpoints/gguf) compares these with its own decode.
//
//   node generate.mjs MODEL.gguf '[[1,450,3186],[1,306]]' 8
//   node generate.mjs --jobs JOBS.json    (several models in one process:
//        [{"model": "a.gguf", "prompts": [[1, 2]], "max_new": 8,
//          "texts": ["Hello"]}, ...]; prints a JSON array, one object a
//        job; a job's texts are tokenized by llama.cpp's tokenizer, no BOS)
import fs from "node:fs";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const args = process.argv.slice(2);
let jobs;
if (args[0] === "--jobs" && args.length === 2) {
  jobs = JSON.parse(fs.readFileSync(args[1], "utf8"));
} else if (args.length >= 2 && args.length <= 3) {
  jobs = [{model: args[0], prompts: JSON.parse(args[1]), max_new: Number(args[2] ?? 8)}];
} else {
  console.error("usage: node generate.mjs MODEL.gguf PROMPTS_JSON [MAX_NEW_TOKENS] | --jobs JOBS.json");
  process.exit(2);
}

// Arrays of the tokenizer (tens of thousands of entries) are summarised:
// their length and first and last entries.
function summarise(v) {
  if (Array.isArray(v)) {
    return v.length > 8 ? {length: v.length, head: v.slice(0, 4), tail: v.slice(-4)} : v;
  }
  if (typeof v === "bigint") return Number(v);
  if (v !== null && typeof v === "object") {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, summarise(x)]));
  }
  return v;
}

const llama = await getLlama({gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true,
  logLevel: LlamaLogLevel.error});

async function run({model, prompts, max_new: maxNew, texts = []}) {
  const m = await llama.loadModel({modelPath: model, gpuLayers: 0});
  // One thread: the test's tiny models gain nothing from more, and
  // llama.cpp's spinning workers starve on a busy machine (12 tokens took
  // 22 s with the default on 2 loaded cores, 26 ms with one).
  const context = await m.createContext({contextSize: 512, sequences: 1, threads: 1});
  const seq = context.getSequence();
  const generations = [];
  for (const p of prompts) {
    await seq.clearHistory();
    const out = [];
    if (maxNew > 0) {
      for await (const t of seq.evaluate(p, {temperature: 0})) {
        out.push(t);
        if (out.length >= maxNew) break;
      }
    }
    generations.push(out);
  }
  const info = m.fileInfo;
  const result = {
    model,
    version: info.version,
    metadata: summarise(info.metadata),
    tensors: info.tensorInfo.map(t => ({name: t.name, dims: t.dimensions.map(Number), type: t.ggmlType})),
    bos: m.tokens.bos, eos: m.tokens.eos,
    generations,
    tokenized: texts.map(t => Array.from(m.tokenize(t))),
  };
  await context.dispose();
  await m.dispose();
  return result;
}

const results = [];
for (const job of jobs) results.push(await run(job));
console.log(JSON.stringify(args[0] === "--jobs" ? results : results[0]));
await llama.dispose();
