#!/usr/bin/env node
// Run an ONNX model with ONNX Runtime's CPU provider and write its outputs as
// NumPy .npy files, as a reference to compare hios's results against.
//
//   node scripts/ort_reference.js MODEL.onnx OUTDIR [NAME=FILE.npy ...]
//        [--dim SYM=V ...] [--dim 'INPUT[AXIS]=V' ...] [--seed N] [--threads N]
//        [--opt none|basic|extended|all] [--verbose]
//
// Inputs given as NAME=FILE.npy are read from .npy files (little-endian,
// C order; float32, float16, int64, int32, uint8 or bool). Inputs not given
// are made here, deterministically: floats uniform in [0,1) from a PRNG seeded
// by --seed (default 0) and the input's position, integers 0, bools false.
// A symbolic dim of a made input must be given as --dim SYM=V (SYM is the
// model's dim_param, e.g. --dim batch=1); a dim with no name as
// --dim 'INPUT[AXIS]=V'.
//
// Writes OUTDIR/<output>.npy for every output, OUTDIR/inputs/<input>.npy for
// every input fed (so another runtime can be fed the same data) and
// OUTDIR/outputs.json with names, files, dtypes and shapes. File names are the
// tensor names with '/' and ':' mapped to '.', any other character outside
// [A-Za-z0-9_.-] mapped to '_'.
//
// onnxruntime-node is loaded from scripts/ort/node_modules; install it with
//   (cd scripts/ort && npm install --ignore-scripts)

'use strict';

const fs = require('fs');
const path = require('path');

// ---------------------------------------------------------------- .npy I/O

// descr <-> ONNX Runtime tensor type. Only little-endian (or byte-sized)
// types are accepted; the writer always emits little-endian.
const NPY_TYPES = {
  float32: { descr: '<f4', size: 4, array: Float32Array },
  float16: { descr: '<f2', size: 2, array: Uint16Array }, // raw IEEE half bits
  float64: { descr: '<f8', size: 8, array: Float64Array },
  int64: { descr: '<i8', size: 8, array: BigInt64Array },
  uint64: { descr: '<u8', size: 8, array: BigUint64Array },
  int32: { descr: '<i4', size: 4, array: Int32Array },
  uint32: { descr: '<u4', size: 4, array: Uint32Array },
  int16: { descr: '<i2', size: 2, array: Int16Array },
  uint16: { descr: '<u2', size: 2, array: Uint16Array },
  int8: { descr: '|i1', size: 1, array: Int8Array },
  uint8: { descr: '|u1', size: 1, array: Uint8Array },
  bool: { descr: '|b1', size: 1, array: Uint8Array },
};
// Types an input .npy may have (the brief's set); outputs may be any above.
const INPUT_NPY_TYPES = ['float32', 'float16', 'int64', 'int32', 'uint8', 'bool'];

function descrToType(descr) {
  // '=' means native order, which is little-endian on every host we run on.
  const d = descr.replace(/^=/, '<');
  for (const [name, t] of Object.entries(NPY_TYPES)) {
    if (t.descr === d) return name;
    if (t.size === 1 && t.descr.slice(1) === d.slice(1)) return name; // '<u1' etc.
  }
  return null;
}

// Parse the header dict of a .npy file: a Python literal such as
// {'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 224, 224), }
function parseNpyHeader(text, file) {
  const descr = /'descr'\s*:\s*'([^']*)'/.exec(text);
  const fortran = /'fortran_order'\s*:\s*(True|False)/.exec(text);
  const shape = /'shape'\s*:\s*\(([^)]*)\)/.exec(text);
  if (!descr || !fortran || !shape) {
    throw new Error(`${file}: cannot parse .npy header ${JSON.stringify(text)}`);
  }
  const dims = shape[1].split(',').map((s) => s.trim()).filter((s) => s.length > 0).map((s) => {
    const v = Number(s.replace(/L$/, ''));
    if (!Number.isInteger(v) || v < 0) throw new Error(`${file}: bad dim '${s}' in .npy shape`);
    return v;
  });
  return { descr: descr[1], fortranOrder: fortran[1] === 'True', shape: dims };
}

function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.length < 10 || buf.readUInt8(0) !== 0x93 || buf.toString('latin1', 1, 6) !== 'NUMPY') {
    throw new Error(`${file}: not a .npy file (bad magic)`);
  }
  const major = buf.readUInt8(6);
  let headerLen;
  let offset;
  if (major === 1) {
    headerLen = buf.readUInt16LE(8);
    offset = 10;
  } else if (major === 2 || major === 3) {
    headerLen = buf.readUInt32LE(8);
    offset = 12;
  } else {
    throw new Error(`${file}: unsupported .npy version ${major}`);
  }
  const header = parseNpyHeader(buf.toString(major === 3 ? 'utf8' : 'latin1', offset, offset + headerLen), file);
  if (header.fortranOrder) throw new Error(`${file}: Fortran-order arrays are not supported; save with np.ascontiguousarray`);
  const type = descrToType(header.descr);
  if (!type) throw new Error(`${file}: unsupported dtype '${header.descr}' (big-endian or not a plain numeric type)`);
  const count = header.shape.reduce((a, b) => a * b, 1);
  const dataStart = offset + headerLen;
  const nbytes = count * NPY_TYPES[type].size;
  if (buf.length - dataStart < nbytes) {
    throw new Error(`${file}: truncated: ${buf.length - dataStart} data bytes, ${nbytes} expected`);
  }
  // Copy into a fresh, aligned ArrayBuffer for the typed array view.
  const raw = new ArrayBuffer(nbytes);
  new Uint8Array(raw).set(buf.subarray(dataStart, dataStart + nbytes));
  const data = new NPY_TYPES[type].array(raw);
  return { type, shape: header.shape, data };
}

function writeNpy(file, type, shape, data) {
  const t = NPY_TYPES[type];
  if (!t) throw new Error(`cannot write dtype ${type} as .npy`);
  const shapeText = shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(', ')})`;
  let header = `{'descr': '${t.descr}', 'fortran_order': False, 'shape': ${shapeText}, }`;
  // Pad with spaces so that magic + version + length + header ends at a
  // multiple of 64 bytes, and end with '\n', as the format asks.
  const pre = 10;
  const total = Math.ceil((pre + header.length + 1) / 64) * 64;
  header = header + ' '.repeat(total - pre - header.length - 1) + '\n';
  const head = Buffer.alloc(pre);
  head.writeUInt8(0x93, 0);
  head.write('NUMPY', 1, 'latin1');
  head.writeUInt8(1, 6);
  head.writeUInt8(0, 7);
  head.writeUInt16LE(header.length, 8);
  const body = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  if (body.length !== shape.reduce((a, b) => a * b, 1) * t.size) {
    throw new Error(`${file}: data size ${body.length} does not match shape ${shapeText} of ${type}`);
  }
  fs.writeFileSync(file, Buffer.concat([head, Buffer.from(header, 'latin1'), body]));
}

// ---------------------------------------------------------------- helpers

function sanitize(name) {
  let s = '';
  for (const ch of name) {
    if (/[A-Za-z0-9_.-]/.test(ch)) s += ch;
    else if (ch === '/' || ch === ':') s += '.';
    else s += '_';
  }
  // Never a name that means "this folder" or "the parent", nor an empty one.
  if (s === '' || s === '.' || s === '..') s = '_' + s;
  return s;
}

// Unique file stems within one folder: a second tensor whose name sanitizes
// to a stem already taken gets '.1', '.2', ... appended.
function stemAllocator() {
  const used = new Set();
  return (name) => {
    const base = sanitize(name);
    let stem = base;
    for (let i = 1; used.has(stem.toLowerCase()); i++) stem = `${base}.${i}`;
    used.add(stem.toLowerCase());
    return stem;
  };
}

// mulberry32: a small, fixed PRNG, so made inputs are the same on every run
// and machine for a given seed.
function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// float32 value -> IEEE half bits, round to nearest even.
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
function toHalf(v) {
  f32[0] = v;
  const x = u32[0];
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0); // inf / nan
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00; // overflow
  if (e <= 0) {
    if (e < -10) return sign; // underflow to zero
    mant |= 0x800000;
    const shift = 14 - e;
    let h = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    if (rem > half || (rem === half && (h & 1))) h++;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (h & 1))) h++; // may carry into exp: still right
  return sign | h;
}

function makeInput(ort, type, shape, rand) {
  const n = shape.reduce((a, b) => a * b, 1);
  switch (type) {
    case 'float32': {
      const d = new Float32Array(n);
      for (let i = 0; i < n; i++) d[i] = rand();
      return d;
    }
    case 'float64': {
      const d = new Float64Array(n);
      for (let i = 0; i < n; i++) d[i] = rand();
      return d;
    }
    case 'float16': {
      const d = new Uint16Array(n);
      for (let i = 0; i < n; i++) d[i] = toHalf(rand());
      return d;
    }
    default: {
      const t = NPY_TYPES[type];
      if (!t) throw new Error(`cannot make an input of type ${type}`);
      return new t.array(n); // zeros (false for bool)
    }
  }
}

function usage(msg) {
  if (msg) process.stderr.write(`ort_reference.js: ${msg}\n`);
  process.stderr.write(
    'usage: node scripts/ort_reference.js MODEL.onnx OUTDIR [NAME=FILE.npy ...]\n' +
      "       [--dim SYM=V ...] [--dim 'INPUT[AXIS]=V' ...] [--seed N] [--threads N] [--opt none|basic|extended|all] [--verbose]\n");
  process.exit(2);
}

function parseArgs(argv) {
  const opts = { positional: [], dims: new Map(), axisDims: new Map(), seed: 0, threads: 0, opt: 'all', verbose: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const takeValue = () => {
      const eq = a.indexOf('=');
      if (eq >= 0 && a.startsWith('--') && a.slice(0, eq).match(/^--[a-z]+$/)) return a.slice(eq + 1);
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      return argv[++i];
    };
    const flag = a.startsWith('--') ? a.split('=')[0] : null;
    if (flag === '--dim') {
      const v = takeValue();
      const eq = v.lastIndexOf('=');
      if (eq <= 0) usage(`--dim wants NAME=V, got '${v}'`);
      const key = v.slice(0, eq);
      const val = Number(v.slice(eq + 1));
      if (!Number.isInteger(val) || val < 0) usage(`--dim ${key}: '${v.slice(eq + 1)}' is not a size`);
      const m = /^(.*)\[(\d+)\]$/.exec(key);
      if (m) opts.axisDims.set(`${m[1]}\u0000${m[2]}`, val);
      else opts.dims.set(key, val);
    } else if (flag === '--seed') {
      opts.seed = Number(takeValue());
      if (!Number.isInteger(opts.seed)) usage('--seed wants an integer');
    } else if (flag === '--threads') {
      opts.threads = Number(takeValue());
      if (!Number.isInteger(opts.threads) || opts.threads < 0) usage('--threads wants a count');
    } else if (flag === '--opt') {
      opts.opt = takeValue();
      if (!['disabled', 'none', 'basic', 'extended', 'all'].includes(opts.opt)) usage(`unknown --opt ${opts.opt}`);
      if (opts.opt === 'none') opts.opt = 'disabled';
    } else if (a === '--verbose') {
      opts.verbose = true;
    } else if (a === '-h' || a === '--help') {
      usage();
    } else if (a.startsWith('--')) {
      usage(`unknown option ${a}`);
    } else {
      opts.positional.push(a);
    }
  }
  if (opts.positional.length < 2) usage('MODEL.onnx and OUTDIR are required');
  return opts;
}

function loadOrt() {
  const dir = path.join(__dirname, 'ort', 'node_modules', 'onnxruntime-node');
  if (!fs.existsSync(dir)) {
    process.stderr.write(`ort_reference.js: ${dir} is missing; run: (cd ${path.join(__dirname, 'ort')} && npm install --ignore-scripts)\n`);
    process.exit(3);
  }
  return require(dir);
}

// ---------------------------------------------------------------- main

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const [modelPath, outDir, ...feedArgs] = opts.positional;
  const ort = loadOrt();

  // logSeverityLevel 3: errors only (ORT warns about unused initializers in
  // many exported models; --verbose shows those warnings).
  const sessionOptions = { executionProviders: ['cpu'], graphOptimizationLevel: opts.opt, logSeverityLevel: opts.verbose ? 1 : 3 };
  if (opts.threads > 0) {
    sessionOptions.intraOpNumThreads = opts.threads;
    sessionOptions.interOpNumThreads = 1;
  }
  const session = await ort.InferenceSession.create(modelPath, sessionOptions);
  const meta = new Map(session.inputMetadata.map((m) => [m.name, m]));

  // NAME=FILE.npy; NAME may itself hold '=', so take the split whose left
  // side is one of the model's input names.
  const files = new Map();
  for (const arg of feedArgs) {
    let found = false;
    for (let eq = arg.indexOf('='); eq > 0; eq = arg.indexOf('=', eq + 1)) {
      if (meta.has(arg.slice(0, eq))) {
        files.set(arg.slice(0, eq), arg.slice(eq + 1));
        found = true;
        break;
      }
    }
    if (!found) usage(`'${arg}' is not NAME=FILE.npy for an input of the model (inputs: ${session.inputNames.join(', ')})`);
  }

  const feeds = {};
  const fed = [];
  session.inputNames.forEach((name, index) => {
    const m = meta.get(name);
    if (!m.isTensor) throw new Error(`input ${name} is not a tensor; not supported`);
    if (files.has(name)) {
      const file = files.get(name);
      const a = readNpy(file);
      if (!INPUT_NPY_TYPES.includes(a.type)) throw new Error(`${file}: dtype ${a.type} is not one of ${INPUT_NPY_TYPES.join(', ')}`);
      if (a.type !== m.type) throw new Error(`${file}: dtype ${a.type}, but input ${name} is ${m.type}`);
      if (m.shape.length !== a.shape.length) throw new Error(`${file}: rank ${a.shape.length}, but input ${name} has rank ${m.shape.length}`);
      m.shape.forEach((d, k) => {
        if (typeof d === 'number' && d >= 0 && d !== a.shape[k]) {
          throw new Error(`${file}: dim ${k} is ${a.shape[k]}, but input ${name} has ${d} there`);
        }
        if (typeof d === 'string' && d !== '' && opts.dims.has(d) && opts.dims.get(d) !== a.shape[k]) {
          throw new Error(`${file}: dim ${k} is ${a.shape[k]}, but --dim ${d}=${opts.dims.get(d)}`);
        }
      });
      feeds[name] = new ort.Tensor(a.type, a.data, a.shape);
      fed.push({ name, type: a.type, shape: a.shape, source: file, data: a.data });
    } else {
      const shape = m.shape.map((d, k) => {
        const axisKey = `${name}\u0000${k}`;
        if (opts.axisDims.has(axisKey)) return opts.axisDims.get(axisKey);
        if (typeof d === 'number' && d >= 0) return d;
        if (typeof d === 'string' && d !== '') {
          if (opts.dims.has(d)) return opts.dims.get(d);
          throw new Error(`input ${name} has symbolic dim '${d}' (axis ${k}); give it as --dim '${d}=V'`);
        }
        throw new Error(`input ${name} has an unnamed dynamic dim at axis ${k}; give it as --dim '${name}[${k}]=V'`);
      });
      const data = makeInput(ort, m.type, shape, prng((opts.seed * 1000003 + index) >>> 0));
      feeds[name] = new ort.Tensor(m.type, data, shape);
      fed.push({ name, type: m.type, shape, source: `made: ${m.type.startsWith('float') ? `uniform [0,1), seed ${opts.seed}, input #${index}` : 'zeros'}`, data });
    }
  });

  const t0 = process.hrtime.bigint();
  const results = await session.run(feeds);
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;

  fs.mkdirSync(path.join(outDir, 'inputs'), { recursive: true });
  const inStem = stemAllocator();
  const inputsJson = fed.map((f) => {
    const file = path.join('inputs', `${inStem(f.name)}.npy`);
    writeNpy(path.join(outDir, file), f.type, f.shape, f.data);
    return { name: f.name, file, dtype: f.type, shape: f.shape, source: f.source };
  });

  const outStem = stemAllocator();
  outStem('outputs'); // keep 'outputs.json' and the inputs/ folder unshadowed
  outStem('inputs');
  const outputsJson = [];
  for (const name of session.outputNames) {
    const t = results[name];
    if (!NPY_TYPES[t.type]) throw new Error(`output ${name} has type ${t.type}, which cannot be written as .npy`);
    const file = `${outStem(name)}.npy`;
    let data = t.data;
    if (t.type === 'float16' && !(data instanceof Uint16Array)) {
      // A runtime with Float16Array hands values, not bits: reinterpret.
      data = new Uint16Array(data.buffer, data.byteOffset, data.length);
    }
    writeNpy(path.join(outDir, file), t.type, t.dims, data);
    outputsJson.push({ name, file, dtype: t.type, shape: Array.from(t.dims) });
  }

  const report = {
    model: path.resolve(modelPath),
    runtime: `onnxruntime-node ${ort.env.versions ? ort.env.versions.node : '?'}`,
    execution_provider: 'cpu',
    graph_optimization: opts.opt,
    run_ms: Math.round(ms * 10) / 10,
    inputs: inputsJson,
    outputs: outputsJson,
  };
  // Indented JSON, with each shape kept on one line.
  const json = JSON.stringify(report, null, 2).replace(/\[\s*([-\d\s,]*?)\s*\]/g, (m, body) => `[${body.split(/\s*,\s*/).filter((x) => x !== '').join(', ')}]`);
  fs.writeFileSync(path.join(outDir, 'outputs.json'), json + '\n');
  for (const o of outputsJson) {
    process.stdout.write(`${o.name}\t${o.dtype}\t[${o.shape.join(', ')}]\t${path.join(outDir, o.file)}\n`);
  }
  process.stdout.write(`ran in ${report.run_ms} ms; ${outputsJson.length} outputs in ${outDir}\n`);
}

if (require.main === module) {
  main().catch((e) => {
    process.stderr.write(`ort_reference.js: ${e && e.message ? e.message : e}\n`);
    process.exit(1);
  });
}

module.exports = { readNpy, writeNpy, sanitize, toHalf };
