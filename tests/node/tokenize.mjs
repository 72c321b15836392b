// Reference tokenization for sluice's differential tokenizer test: encodes a UTF-8 file with
// @huggingface/tokenizers (no special tokens added) as a whole and line by line (each line keeps
// its "\n"), and prints {"whole": [...], "lines": [[...], ...]} on stdout.
// usage: node tokenize.mjs DIR_WITH_TOKENIZER_JSON INPUT_FILE
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";

const [dir, input] = process.argv.slice(2);
if (!dir || !input) {
  console.error("usage: node tokenize.mjs DIR_WITH_TOKENIZER_JSON INPUT_FILE");
  process.exit(2);
}
const tokenizerJson = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
const tokenizerConfig = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
const tokenizer = new Tokenizer(tokenizerJson, tokenizerConfig);

const text = readFileSync(input, "utf8");
const encode = (s) => tokenizer.encode(s, { add_special_tokens: false }).ids;
const lines = text.match(/[^\n]*\n|[^\n]+$/g) ?? [];
process.stdout.write(JSON.stringify({ whole: encode(text), lines: lines.map(encode) }) + "\n");
