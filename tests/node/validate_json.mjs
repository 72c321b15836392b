// Validates generated JSON against JSON Schemas with ajv (draft 2020-12, with ajv-formats), for
// the structured-output tests. usage: node validate_json.mjs CASES.json
// CASES.json: [{"name": ..., "schema": {...}, "outputs": ["<generated text>", ...]}, ...]. Every
// output must parse as JSON and validate. Prints one line per case and the failures; exits 1 if
// any output fails, 2 if a schema does not compile.
import { readFileSync } from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const cases = JSON.parse(readFileSync(process.argv[2], "utf8"));
// Strict about keywords (a misspelt one is an error, as in sluice), not about tuple and type style.
const ajv = new Ajv2020({ allErrors: true, strict: true, strictTuples: false, strictTypes: false, allowUnionTypes: true });
addFormats(ajv);

let failed = 0, checked = 0;
for (const c of cases) {
  let validate;
  try {
    validate = ajv.compile(c.schema);
  } catch (e) {
    console.log(`SCHEMA ${c.name}: ${e.message}`);
    process.exit(2);
  }
  let bad = 0;
  for (const text of c.outputs) {
    ++checked;
    let value;
    try {
      value = JSON.parse(text);
    } catch (e) {
      console.log(`FAIL ${c.name}: not JSON (${e.message}): ${JSON.stringify(text)}`);
      ++bad;
      continue;
    }
    if (!validate(value)) {
      console.log(`FAIL ${c.name}: ${ajv.errorsText(validate.errors)}: ${JSON.stringify(text)}`);
      ++bad;
    }
  }
  failed += bad;
  console.log(`${bad ? "bad " : "ok  "} ${c.name}: ${c.outputs.length - bad}/${c.outputs.length} valid`);
}
console.log(`${checked - failed} of ${checked} outputs valid`);
process.exit(failed ? 1 : 0);
