// validate.mjs checks the published event contract with a second validator,
// independent of the Go one (santhosh-tekuri/jsonschema): Ajv (draft 2020-12)
// with ajv-formats, in strict mode, where every strict-mode warning is an
// error. Both are pinned in package.json (devDependencies); `make deps`
// installs them. It is run by events/ajv_test.go (so `go test ./...` and
// `make test` cover it) and can be run by hand:
//
//	node events/validate.mjs [cases.json]
//
// It checks, and exits 1 on the first class of failure with a report:
//
//  1. every schemas/*.json compiles under strict, strictTypes, strictTuples
//     and strictRequired, with formats asserted (date-time, uuid);
//  2. every samples/*.json: each outbox envelope it carries (the
//     EventBridge detail, the NewImage of each outbox INSERT/MODIFY in a
//     stream batch) validates against the schema its event_type and
//     event_version name; a sample this script does not know is an error,
//     so a new sample must be classified here;
//  3. with cases.json ({"valid":[{"name","doc"}],"invalid":[{"name","doc"}]},
//     written by the Go test from the order domain): every valid document
//     validates and every invalid one is refused (no schema for its
//     type/version counts as refused).
//
// Output: one line per failure and a summary line "ajv: N schemas, M sample
// envelopes, V valid + I invalid cases: ok".

import { readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const here = dirname(fileURLToPath(import.meta.url));
const failures = [];
const fail = (msg) => failures.push(msg);

// Strict mode: a warning (e.g. "minimum" without "type" under strictTypes)
// is an error, not a log line.
const ajv = new Ajv2020({
  strict: true,
  strictSchema: true,
  strictNumbers: true,
  strictTypes: true,
  strictTuples: true,
  strictRequired: true,
  allErrors: true,
  validateFormats: true,
  logger: {
    log: () => {},
    warn: (...args) => {
      throw new Error("strict mode warning: " + args.join(" "));
    },
    error: (...args) => {
      throw new Error(args.join(" "));
    },
  },
});
addFormats(ajv);

// 1. Schemas.
const validators = new Map(); // "<EventType>.v<version>" -> validate function
const schemaDir = join(here, "schemas");
for (const file of readdirSync(schemaDir).filter((f) => f.endsWith(".json")).sort()) {
  const key = file.replace(/\.json$/, "");
  try {
    const schema = JSON.parse(readFileSync(join(schemaDir, file), "utf8"));
    if (schema.$schema !== "https://json-schema.org/draft/2020-12/schema") {
      fail(`schema ${file}: $schema must be draft 2020-12, got ${schema.$schema}`);
    }
    validators.set(key, ajv.compile(schema));
  } catch (e) {
    fail(`schema ${file}: does not compile in strict mode: ${e.message}`);
  }
}
if (validators.size === 0) {
  fail("no schemas found under " + schemaDir);
}

// check validates doc against the schema its own event_type and
// event_version name. It returns "" when valid, else the reason.
function check(doc) {
  if (doc === null || typeof doc !== "object" || Array.isArray(doc)) {
    return "not a JSON object";
  }
  const key = `${doc.event_type}.v${doc.event_version}`;
  const validate = validators.get(key);
  if (!validate) {
    return `no schema ${key}`;
  }
  if (validate(doc)) {
    return "";
  }
  return ajv.errorsText(validate.errors);
}

// fromImage rebuilds the envelope from a stream image of an outbox record
// (DynamoDB JSON: S and N attributes; the payload is JSON text in S), the
// way the relay does (pkg/streamimage).
function fromImage(img) {
  const s = (n) => (img[n] && "S" in img[n] ? img[n].S : undefined);
  const n = (n) => (img[n] && "N" in img[n] ? Number(img[n].N) : undefined);
  const env = {
    event_id: s("event_id"),
    event_type: s("event_type"),
    event_version: n("event_version"),
    aggregate_type: s("aggregate_type"),
    aggregate_id: s("aggregate_id"),
    sequence: n("sequence"),
    occurred_at: s("occurred_at"),
  };
  for (const opt of ["correlation_id", "causation_id", "actor", "traceparent", "tracestate"]) {
    if (s(opt) !== undefined) env[opt] = s(opt);
  }
  env.payload = JSON.parse(s("payload"));
  return env;
}

// envelopesOf lists the outbox envelopes a sample carries. Samples without
// envelopes are listed with an empty result; an unknown sample is an error.
const sampleKinds = {
  "eventbridge-order-paid.json": (doc) => [doc.detail],
  "stream-batch.json": (doc) =>
    doc.Records.filter(
      (r) => (r.eventName === "INSERT" || r.eventName === "MODIFY") && r.dynamodb.NewImage && r.dynamodb.NewImage.event_id,
    ).map((r) => fromImage(r.dynamodb.NewImage)),
  // An API Gateway request (POST /orders): no envelope; the body must be a
  // JSON object.
  "api-create-order.json": (doc) => {
    const body = doc.isBase64Encoded ? Buffer.from(doc.body, "base64").toString("utf8") : doc.body;
    const v = JSON.parse(body);
    if (v === null || typeof v !== "object" || Array.isArray(v)) {
      throw new Error("body is not a JSON object");
    }
    return [];
  },
  // The reconciler's scheduled event: no envelope.
  "scheduled-event.json": () => [],
};

// 2. Samples.
let sampleEnvelopes = 0;
const sampleDir = join(here, "samples");
for (const file of readdirSync(sampleDir).filter((f) => f.endsWith(".json")).sort()) {
  const kind = sampleKinds[file];
  if (!kind) {
    fail(`sample ${file}: unknown to validate.mjs; list it in sampleKinds with the envelopes it carries`);
    continue;
  }
  try {
    const doc = JSON.parse(readFileSync(join(sampleDir, file), "utf8"));
    for (const [i, env] of kind(doc).entries()) {
      sampleEnvelopes++;
      const why = check(env);
      if (why) fail(`sample ${file} envelope #${i}: ${why}`);
    }
  } catch (e) {
    fail(`sample ${file}: ${e.message}`);
  }
}

// 3. Cases from the Go test.
let valid = 0;
let invalid = 0;
if (process.argv[2]) {
  const cases = JSON.parse(readFileSync(process.argv[2], "utf8"));
  for (const c of cases.valid ?? []) {
    valid++;
    const why = check(c.doc);
    if (why) fail(`valid case ${c.name}: refused: ${why}`);
  }
  for (const c of cases.invalid ?? []) {
    invalid++;
    if (!check(c.doc)) fail(`invalid case ${c.name}: accepted`);
  }
}

const summary = `ajv: ${validators.size} schemas, ${sampleEnvelopes} sample envelopes, ${valid} valid + ${invalid} invalid cases`;
if (failures.length > 0) {
  for (const f of failures) console.error(f);
  console.error(`${summary}: ${failures.length} failure(s)`);
  process.exit(1);
}
console.log(`${summary}: ok`);
