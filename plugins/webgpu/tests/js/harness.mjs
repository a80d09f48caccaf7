// Runs the retarget.js that `retarget export` wrote, under Node, for plugins/webgpu/tests/test_js_loader.py.
// WebGPU is Dawn's (the `webgpu` package, the implementation in Chrome): a core adapter where there is one (a GPU's
// Vulkan), else the compatibility adapter of Dawn's OpenGL ES backend, which on a machine without a GPU is Mesa's
// llvmpipe (Dawn refuses lavapipe's Vulkan: it lacks shaderSampledImageArrayDynamicIndexing). The model's folder
// is served over HTTP on 127.0.0.1, so the loader fetches as in a browser. Prints one JSON object.
//
//   node harness.mjs probe                          the adapter, or {"error"}
//   node harness.mjs plan FOLDER CASES.json          planDispatch of each case (no GPU needed): CASES.json holds
//                                                   {kernels, cases: [{entry, bindings}], alignment, max_binding}
//   node harness.mjs run FOLDER FUNCTION OUT CALL... CALL: comma-separated input files (raw bytes); writes
//                                                   OUT/call{c}_output{k}.bin (HARNESS_OWN_DEVICE=1: load()
//                                                   is given a device requested with deviceDescriptor)
//   node harness.mjs page FOLDER                    runs the module script of FOLDER/index.html; its log
import {mkdtemp, readFile, rm, writeFile} from "node:fs/promises";
import {createServer} from "node:http";
import {tmpdir} from "node:os";
import {extname, join} from "node:path";
import {pathToFileURL} from "node:url";

const [command, folder, ...rest] = process.argv.slice(2);

const instances = [];

async function webgpu() {
  process.env.EGL_PLATFORM ??= "surfaceless";  // Mesa's EGL without a display, for Dawn's OpenGL ES backend
  // Mesa's window-system probes complain once per adapter without it; compute never needs it.
  process.env.XDG_RUNTIME_DIR ??= await mkdtemp(join(tmpdir(), "retarget-xdg-"));
  const {create, globals} = await import("webgpu");
  Object.assign(globalThis, globals);
  // The GPU objects are kept for the whole run: dawn.node crashes when one is collected before its adapter.
  instances.push(create([]));
  const core = await instances[0].requestAdapter();
  if (!core) instances.push(create(["backend=opengles"]));
  const adapter = core ?? await instances[1].requestAdapter({featureLevel: "compatibility"});
  if (!adapter) throw new Error("Dawn found no WebGPU adapter (neither Vulkan nor OpenGL ES)");
  // navigator.gpu as a page has it: requestAdapter() answers the adapter found here.
  const shim = {requestAdapter: async () => adapter, getPreferredCanvasFormat: () => "rgba8unorm"};
  if (globalThis.navigator) Object.defineProperty(globalThis.navigator, "gpu", {value: shim, configurable: true});
  else globalThis.navigator = {gpu: shim};
  return {adapter, level: core ? "core" : "compatibility"};
}

const TYPES = {".json": "application/json", ".js": "text/javascript", ".html": "text/html", ".wgsl": "text/wgsl"};

async function serve(root) {
  const server = createServer(async (request, response) => {
    try {
      const path = decodeURIComponent(new URL(request.url, "http://x").pathname);
      if (path.includes("..")) throw new Error("outside the folder");
      const data = await readFile(join(root, path));
      response.writeHead(200, {"content-type": TYPES[extname(path)] ?? "application/octet-stream"});
      response.end(data);
    } catch {
      response.writeHead(404);
      response.end();
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {server, url: `http://127.0.0.1:${server.address().port}/`};
}

async function main() {
  if (command === "probe") {
    const {adapter, level} = await webgpu();
    const info = adapter.info;
    return {adapter: [info.vendor, info.architecture, info.device, info.description].filter(Boolean).join(" "),
            level, features: [...adapter.features].sort()};
  }
  const loader = await import(pathToFileURL(join(folder, "retarget.js")).href);
  if (command === "plan") {
    const {kernels, cases, alignment, max_binding: maxBinding} = JSON.parse(await readFile(rest[0], "utf8"));
    return {plans: cases.map(({entry, bindings}) => {
      try {
        return loader.planDispatch(kernels[entry], bindings, alignment, maxBinding);
      } catch (e) {
        return {error: e.message};
      }
    })};
  }
  await webgpu();
  const {server, url} = await serve(folder);
  try {
    if (command === "run") {
      const [name, out, ...calls] = rest;
      let start = performance.now();
      const options = {};
      if (process.env.HARNESS_OWN_DEVICE) {  // a device the caller requested, as a page that shares it would
        const manifest = JSON.parse(await readFile(join(folder, "manifest.json"), "utf8"));
        const adapter = await navigator.gpu.requestAdapter();
        options.device = await adapter.requestDevice(loader.deviceDescriptor(manifest, adapter));
      }
      const model = await loader.load(new URL("manifest.json", url).href, options);
      const seconds = {load: (performance.now() - start) / 1e3, calls: []};
      const fn = model.functions[name];
      const outputs = [];
      for (const [c, call] of calls.entries()) {
        const files = call ? call.split(",") : [];
        const inputs = await Promise.all(files.map(async (file, i) => {
          const bytes = await readFile(file);
          const TypedArray = fn.inputs[i]?.TypedArray ?? Float32Array;
          return new TypedArray(bytes.buffer, bytes.byteOffset, bytes.byteLength / TypedArray.BYTES_PER_ELEMENT);
        }));
        start = performance.now();
        const result = await fn(...inputs);
        seconds.calls.push((performance.now() - start) / 1e3);
        const results = fn.outputs.length === 1 ? [result] : result;
        outputs.push(await Promise.all(results.map(async (y, k) => {
          const file = join(out, `call${c}_output${k}.bin`);
          await writeFile(file, new Uint8Array(y.buffer, y.byteOffset, y.byteLength));
          return file;
        })));
      }
      model.destroy();
      return {signature: fn.signature, outputs, seconds};
    }
    if (command === "page") {
      const html = await readFile(join(folder, "index.html"), "utf8");
      const script = html.match(/<script type="module">([\s\S]*?)<\/script>/)[1];
      const log = {textContent: html.match(/<pre id="log">([^<]*)<\/pre>/)[1]};
      globalThis.document = {getElementById: (id) => (id === "log" ? log : null)};
      globalThis.location = {href: new URL("index.html", url).href};
      const page = join(folder, ".harness-page.mjs");
      await writeFile(page, script);
      try {
        await import(pathToFileURL(page).href);
      } finally {
        await rm(page);
      }
      return {log: log.textContent};
    }
    throw new Error(`unknown command ${command}`);
  } finally {
    server.close();
  }
}

main().then(
  (result) => { process.stdout.write(JSON.stringify(result) + "\n"); process.exit(0); },
  (e) => { process.stdout.write(JSON.stringify({error: e.message, name: e.name}) + "\n"); process.exit(0); },
);
