// retarget.js: run a model that `retarget export` wrote, on WebGPU, in a browser (or Node with a WebGPU
// package). One ES module, no dependencies; it does what retarget's Python `webgpu` driver does:
//
//   const model = await load("model/manifest.json");       // fetches the WGSL and the constants once
//   const y = await model.main(new Float32Array(8 * 64));   // a function per name: typed arrays in and out
//
// load() requests a device with the limits and features the model was compiled for (or takes yours:
// {device}), uploads the constant pool once, makes one compute pipeline per kernel with an explicit
// bind-group layout (storage buffers, then the uniform rt_base), and per function an arena and every
// dispatch's bind group and rt_base (binding model: planDispatch below). A call writes the inputs,
// encodes the whole function in one command encoder (consecutive dispatches share a compute pass),
// copies the outputs into one readback buffer, submits, and maps it.

export const FORMAT = "retarget-webgpu-export";
export const VERSION = 2;

/** An error a user can cause: `message` says what is wrong and where, `hint` what to do. */
export class RetargetError extends Error {
  constructor(message, hint = "") {
    super(hint ? `${message} (${hint})` : message);
    this.name = "RetargetError";
    this.hint = hint;
  }
}

// retarget's element types -> typed arrays. f16 is a Float16Array where the engine has one, else the raw bits.
// (WGSL buffers hold f32, i32, u32 and f16; bool, bf16 and the 8- and 16-bit integers sit in 32-bit words, and an
// i64 or ui64 in two of them, low first, laid out as these arrays' bytes: each is the whole 64-bit value.)
const ARRAYS = {
  f32: Float32Array, i32: Int32Array, ui32: Uint32Array, f16: globalThis.Float16Array ?? Uint16Array,
  i8: Int8Array, ui8: Uint8Array, i16: Int16Array, ui16: Uint16Array, i1: Uint8Array, i64: BigInt64Array,
  ui64: BigUint64Array,
};
const REEXPORT = "export it again with this version of retarget: retarget export MODEL.rtm -o FOLDER";
const roundUp = (n, to) => Math.ceil(n / to) * to;
const camel = (key) => key.replace(/-([a-z])/g, (_, c) => c.toUpperCase());

/**
 * Load the model whose manifest is at `url` (relative to the page, or absolute). Options:
 * - device: a GPUDevice to run on (default: one requested from navigator.gpu with the model's limits and features);
 * - fetch: the function that fetches the model's files (default: globalThis.fetch).
 * Returns a Model: model.functions[name] (and model[name] where that name is free) is an async function of the
 * inputs, flat typed arrays in C order, that resolves to the output (several outputs: an array of them).
 */
export async function load(url, options = {}) {
  const get = options.fetch ?? globalThis.fetch;
  const base = absolute(url);
  const manifest = await fetchFile(get, base, "json");
  if (manifest?.format !== FORMAT) {
    throw new RetargetError(`${base} is not a model that retarget export wrote (its format is ` +
                            `${JSON.stringify(manifest?.format)})`, "load the manifest.json that retarget export wrote");
  }
  if (manifest.version !== VERSION) {
    throw new RetargetError(`${base} is version ${manifest.version} of the export format; this retarget.js reads ` +
                            `version ${VERSION}`, REEXPORT);
  }
  const device = options.device ?? await requestDevice(manifest);
  if (options.device) {
    const short = missing(manifest, device);
    if (short.length) {
      throw new RetargetError(`the model was compiled for webgpu-spirv:${manifest.target.arch}, which assumes more ` +
                              `than this device has: ${short.join(", ")}`,
                              "request it with deviceDescriptor(manifest, adapter) from retarget.js, or compile " +
                              "for webgpu-spirv:webgpu");
    }
  }
  return new Model(manifest, device, base, get, !options.device).ready();
}

/** What to pass to requestDevice for `manifest`: {requiredLimits, requiredFeatures} (limits the adapter knows). */
export function deviceDescriptor(manifest, adapter) {
  const requiredLimits = {};
  for (const [key, value] of Object.entries(manifest.limits)) {
    // max-* only: the code does not depend on the alignments (the binding plan uses the device's own)
    if (key.startsWith("max-") && (!adapter || camel(key) in adapter.limits)) requiredLimits[camel(key)] = value;
  }
  return {requiredLimits, requiredFeatures: [...manifest.features]};
}

/** The limits and features `manifest` needs and `device` (or an adapter) lacks, as readable strings. */
export function missing(manifest, device) {
  const short = [];
  for (const [key, value] of Object.entries(manifest.limits)) {
    const has = device.limits[camel(key)];
    if (key.startsWith("max-") && has !== undefined && has < value) short.push(`${camel(key)} ${value} > ${has}`);
  }
  for (const feature of manifest.features) if (!device.features.has(feature)) short.push(`feature ${feature}`);
  return short;
}

async function requestDevice(manifest) {
  const gpu = globalThis.navigator?.gpu;
  if (!gpu) {
    throw new RetargetError("WebGPU is not available here (navigator.gpu is undefined)",
                            "use a browser with WebGPU (Chrome or Edge 113+, Safari 26+, Firefox 141+ on Windows), " +
                            "on a page served over https or from localhost, or pass {device}");
  }
  const adapter = await gpu.requestAdapter();
  if (!adapter) {
    throw new RetargetError("the browser has WebGPU but no adapter for it (requestAdapter returned null)",
                            "WebGPU may be off for this GPU or driver: see chrome://gpu, or try another browser");
  }
  const short = missing(manifest, adapter);
  if (short.length) {
    throw new RetargetError(`the model was compiled for webgpu-spirv:${manifest.target.arch}, which assumes more ` +
                            `than this adapter has: ${short.join(", ")}`,
                            "compile for webgpu-spirv:webgpu, which every WebGPU device runs");
  }
  try {
    return await adapter.requestDevice(deviceDescriptor(manifest, adapter));
  } catch (e) {
    throw new RetargetError(`the adapter refused a device for this model: ${e.message}`,
                            "compile for webgpu-spirv:webgpu, which every WebGPU device runs");
  }
}

function absolute(url) {
  try {
    return new URL(url, globalThis.location?.href).href;
  } catch {
    throw new RetargetError(`cannot resolve the model's URL ${JSON.stringify(String(url))}`,
                            "outside a page give an absolute URL, e.g. http://localhost:8000/model/manifest.json");
  }
}

async function fetchFile(get, url, as) {
  let response;
  try {
    response = await get(url);
  } catch (e) {
    const hint = url.startsWith("file:")
      ? "a page opened from a file cannot fetch; serve the folder, e.g. python3 -m http.server -d FOLDER"
      : "serve the folder that retarget export wrote, and check the URL";
    throw new RetargetError(`cannot fetch ${url}: ${e.message}`, hint);
  }
  if (!response.ok) {
    throw new RetargetError(`cannot fetch ${url}: ${response.status} ${response.statusText}`,
                            "serve the whole folder that retarget export wrote, next to its manifest.json");
  }
  try {
    return await (as === "json" ? response.json() : as === "text" ? response.text() : response.arrayBuffer());
  } catch (e) {
    throw new RetargetError(`cannot read ${url}: ${e.message}`, REEXPORT);
  }
}

/**
 * How one dispatch binds its parameters, the same plan as the Python driver's `plan_dispatch` (driver.py says why;
 * tests compare the two). `kernel` is the manifest's kernel, `bindings[i]` parameter i's [buffer key, byte offset,
 * bytes, the buffer's size in bytes]. Returns {groups: [[source, start, size]] per storage binding, source being
 * ["binding", i] or ["scratch", j]; bases: rt_base, each parameter's element offset in its range; scratch: byte
 * sizes of the scratch buffers of packed groups that span buffers; before, after: copies [source, offset,
 * destination, offset, bytes] around the dispatch}.
 */
export function planDispatch(kernel, bindings, alignment, maxBindingSize) {
  const bases = new Array(bindings.length).fill(0);
  const groups = [], scratch = [], before = [], after = [];
  for (const params of kernel.groups) {
    let ranges = params.map((i) => [["binding", i], bindings[i][1], bindings[i][2], bindings[i][3]]);
    if (new Set(params.map((i) => bindings[i][0])).size > 1) {  // a packed group across buffers: gather
      const j = scratch.length, gathered = [];
      let at = 0;
      params.forEach((i, k) => {
        const [source, offset, nbytes, size] = ranges[k], copy = roundUp(nbytes, 4);
        if (offset % 4 || offset + copy > size) {
          throw new RetargetError(`${kernel.name}: a packed binding at byte ${offset} is not 4-byte aligned`, REEXPORT);
        }
        if (kernel.params[i].access === "write") after.push([["scratch", j], at, source, offset, copy]);
        else before.push([source, offset, ["scratch", j], at, copy]);
        gathered.push([["scratch", j], at, nbytes]);
        at += roundUp(nbytes, 16);
      });
      scratch.push(at);
      ranges = gathered.map(([source, offset, nbytes]) => [source, offset, nbytes, Math.max(4, roundUp(at, 4))]);
    }
    const lo = Math.min(...ranges.map((r) => r[1])), hi = Math.max(...ranges.map((r) => r[1] + r[2]));
    const start = lo - lo % alignment;
    const size = Math.min(roundUp(Math.max(hi - start, 4), 4), ranges[0][3] - start);
    if (size > maxBindingSize) {
      throw new RetargetError(`${kernel.name}: a binding of ${size} bytes exceeds this device's ` +
                              `maxStorageBufferBindingSize (${maxBindingSize})`,
                              "request a larger maxStorageBufferBindingSize, or use a smaller model");
    }
    params.forEach((i, k) => {
      const item = kernel.itemsizes[i];
      if ((ranges[k][1] - start) % item) {
        throw new RetargetError(`${kernel.name}: binding ${i} at byte ${ranges[k][1]} is not aligned to its ` +
                                `${item}-byte elements`, REEXPORT);
      }
      bases[i] = (ranges[k][1] - start) / item;
    });
    groups.push([ranges[0][0], start, size]);
  }
  return {groups, bases, scratch, before, after};
}

// WebGPU forbids two bindings of a dispatch to overlap in one buffer when either is writable (ours all are), and
// Chrome checks it. Export lays tensors out 256 bytes apart so that this never happens; say so if it does.
function overlapping(kernel, plan, bindings) {
  const ranges = plan.groups.map(([[kind, i], start, size], g) => [kind === "binding" && bindings[i][0], start,
                                                                     start + size, g]).filter(([key]) => key);
  for (const [key, start, end, g] of ranges) {
    for (const [otherKey, otherStart, otherEnd, h] of ranges) {
      if (g < h && key === otherKey && start < otherEnd && otherStart < end) {
        throw new RetargetError(`kernel ${kernel.name} binds overlapping bytes of the ${key} buffer at bindings ${g} ` +
                                `([${start}, ${end})) and ${h} ([${otherStart}, ${otherEnd})), which WebGPU forbids ` +
                                "for read_write storage", "export the model with this version of retarget; if it " +
                                "persists, report it with the manifest");
      }
    }
  }
}

class Model {
  constructor(manifest, device, base, get, owned) {
    Object.assign(this, {manifest, device, base, fetch: get, owned});
    this.functions = {};
    this.lost = null;  // why the device was lost, once it is
  }

  async ready() {
    const {manifest, device} = this;
    device.lost?.then((info) => { this.lost = info.message || info.reason || "lost"; });
    const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
    this.storage = (nbytes) => device.createBuffer({size: Math.max(4, roundUp(nbytes, 4)), usage});
    const file = (name, as) => fetchFile(this.fetch, new URL(name, this.base).href, as);
    const [constants, sources] = await Promise.all([
      file(manifest.constants.file, "bytes"), Promise.all(manifest.kernels.map((k) => file(k.file, "text")))]);
    if (constants.byteLength !== manifest.constants.size) {
      throw new RetargetError(`${manifest.constants.file} has ${constants.byteLength} bytes and the manifest says ` +
                              `${manifest.constants.size}`, REEXPORT);
    }
    this.constants = this.storage(constants.byteLength);
    writePadded(device, this.constants, 0, new Uint8Array(constants));
    this.pipelines = await Promise.all(manifest.kernels.map((k, i) => this.pipeline(k, sources[i])));
    for (const [name, fn] of Object.entries(manifest.functions)) {
      this.functions[name] = this.function(name, fn);
      if (!(name in this)) this[name] = this.functions[name];
    }
    return this;
  }

  async pipeline(kernel, code) {
    const {device} = this;
    device.pushErrorScope("validation");
    const module = device.createShaderModule({code, label: kernel.name});
    const popped = device.popErrorScope();  // popped at once: the kernels' pipelines are made concurrently
    const messages = (await module.getCompilationInfo?.())?.messages ?? [];
    const errors = messages.filter((m) => m.type === "error");
    const scoped = await popped;
    if (errors.length || scoped) {
      const why = errors.length ? errors.map((m) => `${m.lineNum}:${m.linePos}: ${m.message}`).join("; ") : scoped.message;
      throw new RetargetError(`the device rejected the WGSL of kernel ${kernel.name} (${kernel.file}): ${why}`,
                              "compile for webgpu-spirv:webgpu; if it persists, report it with the .wgsl file");
    }
    const visibility = GPUShaderStage.COMPUTE;
    const entries = kernel.groups.map((_, g) => ({binding: g, visibility, buffer: {type: "storage"}}));
    entries.push({binding: kernel.groups.length, visibility, buffer: {type: "uniform"}});
    // Explicit, not layout: "auto", which leaves out the bindings a kernel does not use.
    const layout = device.createBindGroupLayout({entries, label: kernel.name});
    try {
      const pipeline = await device.createComputePipelineAsync({
        label: kernel.name, layout: device.createPipelineLayout({bindGroupLayouts: [layout]}),
        compute: {module, entryPoint: kernel.entry_point}});
      return {pipeline, layout};
    } catch (e) {
      throw new RetargetError(`the device cannot make a pipeline of kernel ${kernel.name}: ${e.message}`,
                              "compile for webgpu-spirv:webgpu");
    }
  }

  function(name, fn) {
    if (fn.steps) {
      throw new RetargetError(`function ${name} is split across devices (--fallback); a page runs only WebGPU`,
                              "compile without --fallback for the browser");
    }
    const {device, manifest} = this;
    const arena = this.storage(fn.arena_bytes);
    const buffers = {arena, const: this.constants};
    const sizes = {arena: arena.size, const: this.constants.size};
    const alignment = device.limits.minStorageBufferOffsetAlignment;
    const maxBinding = device.limits.maxStorageBufferBindingSize;
    const dispatches = fn.program.filter((c) => c.op === "dispatch");  // barriers: WebGPU orders a queue's work
    // Every dispatch's rt_base is a slot of one uniform buffer, written once.
    const step = roundUp(16 * Math.max(...manifest.kernels.map((k) => Math.ceil(k.params.length / 4)), 1),
                         device.limits.minUniformBufferOffsetAlignment);
    const uniforms = device.createBuffer({size: Math.max(step * dispatches.length, 16),
                                          usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST});
    const segments = [];  // {pass: [[pipeline, bind group, counts]]} or {copy: [src, at, dst, at, bytes]}
    const dispatch = (entry) => {
      if (!segments.length || !segments.at(-1).pass) segments.push({pass: []});
      segments.at(-1).pass.push(entry);
    };
    dispatches.forEach((command, d) => {
      const kernel = manifest.kernels[command.entry];
      const plan = planDispatch(kernel, command.bindings.map(([key, at, nbytes]) => [key, at, nbytes, sizes[key]]),
                                alignment, maxBinding);
      overlapping(kernel, plan, command.bindings);
      const scratch = plan.scratch.map((nbytes) => this.storage(nbytes));
      const buffer = ([kind, i]) => kind === "scratch" ? scratch[i] : buffers[command.bindings[i][0]];
      const base = new Int32Array(roundUp(Math.max(plan.bases.length, 1), 4));
      base.set(plan.bases);
      device.queue.writeBuffer(uniforms, d * step, base);
      const entries = plan.groups.map(([source, offset, size], g) =>
        ({binding: g, resource: {buffer: buffer(source), offset, size}}));
      entries.push({binding: kernel.groups.length, resource: {buffer: uniforms, offset: d * step, size: base.byteLength}});
      const {pipeline, layout} = this.pipelines[command.entry];
      const group = device.createBindGroup({layout, entries, label: `${name}: ${kernel.name}`});
      for (const [src, srcAt, dst, dstAt, n] of plan.before) segments.push({copy: [buffer(src), srcAt, buffer(dst), dstAt, n]});
      dispatch([pipeline, group, kernel.workgroup_count]);
      for (const [src, srcAt, dst, dstAt, n] of plan.after) segments.push({copy: [buffer(src), srcAt, buffer(dst), dstAt, n]});
    });
    // The outputs, copied into one readback buffer in the same encoder (whole 4-byte words).
    let at = 0;
    const reads = fn.outputs.map((o) => {
      const [key, offset, nbytes] = o.slot, start = offset - offset % 4;
      const size = roundUp(offset + nbytes, 4) - start, read = [buffers[key], start, at, size, offset - start];
      at += size;
      return read;
    });
    const readback = device.createBuffer({size: Math.max(at, 4), usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST});
    const inputs = fn.inputs.map((t) => describe(t));
    const outputs = fn.outputs.map((t) => describe(t));
    const signature = `${name}(${inputs.map((t) => `${t.name}: ${t.type}`).join(", ")}) -> (` +
                      `${outputs.map((t) => t.type).join(", ")})`;

    const run = async (...args) => {
      const arrays = check(name, signature, inputs, args);
      return this.serially(async () => {
        if (this.lost) throw new RetargetError(`the GPU device was lost (${this.lost})`, "load the model again");
        device.pushErrorScope("validation");
        arrays.forEach((a, i) => writePadded(device, arena, fn.inputs[i].slot[1], a));
        const encoder = device.createCommandEncoder({label: name});
        for (const segment of segments) {
          if (segment.copy) {
            encoder.copyBufferToBuffer(...segment.copy);
            continue;
          }
          const pass = encoder.beginComputePass({label: name});
          let bound = null;
          for (const [pipeline, group, counts] of segment.pass) {
            if (pipeline !== bound) pass.setPipeline(bound = pipeline);
            pass.setBindGroup(0, group);
            pass.dispatchWorkgroups(...counts);
          }
          pass.end();
        }
        for (const [src, start, to, size] of reads) encoder.copyBufferToBuffer(src, start, readback, to, size);
        device.queue.submit([encoder.finish()]);
        const error = await device.popErrorScope();
        if (error) throw new RetargetError(`the device refused a call of ${name}: ${error.message}`, REEXPORT);
        try {
          await readback.mapAsync(GPUMapMode.READ, 0, Math.max(at, 4));
        } catch (e) {
          throw new RetargetError(`cannot read the outputs of ${name}: ${e.message}`,
                                  this.lost ? `the device was lost (${this.lost}): load the model again` : "");
        }
        try {
          const bytes = readback.getMappedRange(0, Math.max(at, 4));
          const outs = reads.map(([, , to, , skip], i) => {
            const copy = bytes.slice(to + skip, to + skip + outputs[i].bytes);
            return new outputs[i].TypedArray(copy);
          });
          return outs.length === 1 ? outs[0] : outs;
        } finally {
          readback.unmap();
        }
      });
    };
    return Object.assign(run, {signature, inputs, outputs, toString: () => signature,
                               buffers: [arena, uniforms, readback]});
  }

  // Calls share the arena and the readback buffer: one at a time, in order.
  serially(work) {
    const result = (this.pending ?? Promise.resolve()).then(work);
    this.pending = result.catch(() => {});
    return result;
  }

  /** Free the model's buffers, and the device when load() requested it. */
  destroy() {
    for (const fn of Object.values(this.functions)) for (const b of fn.buffers) b.destroy();
    this.constants?.destroy();
    if (this.owned) this.device.destroy();
  }
}

function describe(t) {
  const TypedArray = ARRAYS[t.dtype];
  if (!TypedArray) throw new RetargetError(`a tensor of ${t.dtype} has no typed array here`, REEXPORT);
  const length = t.shape.reduce((a, b) => a * b, 1);
  return {name: t.name ?? "", shape: t.shape, dtype: t.dtype, length, TypedArray, bytes: t.slot[2], range: t.range,
          type: `tensor<${t.shape.map((d) => `${d}x`).join("")}${t.dtype}>`};
}

// The call's arguments as typed arrays of the inputs' types, checked before anything runs; the error names the first
// that does not fit. A plain array of numbers is converted (to an integer type only when it holds integers).
function check(name, signature, inputs, args) {
  if (args.length !== inputs.length) {
    throw new RetargetError(`${signature} takes ${inputs.length} inputs, got ${args.length}`);
  }
  return args.map((arg, i) => {
    const t = inputs[i], where = `input ${i} ('${t.name}') of ${name}`;
    let a = arg;
    if (Array.isArray(arg)) {
      const integer = !/^(f|bf)/.test(t.dtype);
      if (integer && !arg.every(Number.isInteger)) {
        throw new RetargetError(`${where} must be ${t.dtype}, and the array holds non-integers`,
                                `pass a ${t.TypedArray.name}`);
      }
      const big = t.TypedArray === BigInt64Array || t.TypedArray === BigUint64Array;
      a = big ? t.TypedArray.from(arg, BigInt) : t.TypedArray.from(arg);
    } else if (!(arg instanceof t.TypedArray) && !(t.dtype === "f16" && arg instanceof Uint16Array)) {
      const got = arg?.constructor?.name ?? typeof arg;
      throw new RetargetError(`${where} must be a ${t.TypedArray.name} (${t.dtype}), got ${got}`,
                              `convert it, e.g. ${t.TypedArray.name}.from(x)`);
    }
    if (a.length !== t.length) {
      throw new RetargetError(`${where} must hold ${t.length} elements (shape [${t.shape}], flat in C order), ` +
                              `got ${a.length}`, `the function expects ${t.type}`);
    }
    if (t.range) {  // a type the model's target holds only within a range (the manifest's, SupportTable.ranges)
      const [lo, hi, why] = t.range, outside = a.find((v) => v < lo || v > hi);
      if (outside !== undefined) {
        throw new RetargetError(`${where} holds ${outside}, outside [${lo}, ${hi}]: ${why}`,
                                "keep its values within that range");
      }
    }
    return a;
  });
}

// writeBuffer takes whole 4-byte words. The host program starts every tensor at a 64-byte boundary, so the bytes that
// round the end up to a word are padding, never another tensor.
function writePadded(device, buffer, offset, array) {
  const bytes = new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
  if (bytes.byteLength % 4 === 0) {
    device.queue.writeBuffer(buffer, offset, bytes);
    return;
  }
  const padded = new Uint8Array(roundUp(bytes.byteLength, 4));
  padded.set(bytes);
  device.queue.writeBuffer(buffer, offset, padded);
}
