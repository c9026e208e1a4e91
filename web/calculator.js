// The calculator page: the form becomes a `vramsim predict` command line, which runs in a fresh instance of
// the simulator compiled to WebAssembly (vramsim.js: sim/cli/main.cpp, the CLI's own main()). The page shows
// its --json output, a summary of it, and its --html report; an error is the CLI's own one-line message.
//
// Query parameters fill the form (the fields' names are predict's flags without the dashes, plus `config` for
// config.json text, `mode` and `extra`); `run=1` predicts at once. Example:
//   index.html?model=llama-3-8b&gpu=rtx-4090&batch=1&seq=2048&precision=bf16&lora-rank=16&run=1
// When a run ends, <body data-state> is "done" or "error" (the browser tests wait for it).
"use strict";

const form = document.getElementById("calculator");
const statusLine = document.getElementById("status");
const CONFIG_PATH = "/input/config.json";
const HTML_PATH = "/output/report.html";

// One run of the CLI in a fresh instance (no state of an earlier run survives). `files` are written into its
// in-memory file system first. Resolves to {status, stdout, stderr, fs}.
async function runVramsim(args, files = {}) {
  const stdout = [];
  const stderr = [];
  const module = await createVramsim({
    print: (line) => stdout.push(line),
    printErr: (line) => stderr.push(line),
  });
  module.FS.mkdir("/input");
  module.FS.mkdir("/output");
  for (const [path, text] of Object.entries(files)) {
    module.FS.writeFile(path, text);
  }
  let status;
  try {
    status = module.callMain(args);
  } catch (e) {
    // Only an abort lands here (main() turns every C++ exception into a message): wasm32's 4 GiB ran out.
    stderr.push(`vramsim: error: the simulator stopped in the browser (${e}); the CLI has no 4 GiB limit`);
    status = 2;
  }
  return { status, stdout: stdout.join("\n"), stderr: stderr.join("\n"), fs: module.FS };
}

// The first column of a `predict --list-models` / `--list-gpus` table, its header line skipped.
function firstColumn(table) {
  return table.split("\n").slice(1).map((line) => line.split(/\s+/)[0]).filter((name) => name !== "");
}

function fillSelect(select, names, preferred) {
  select.replaceChildren(...names.map((name) => new Option(name, name)));
  if (names.includes(preferred)) {
    select.value = preferred;
  }
}

// Splits the "other flags" text as a shell would for plain words and '...' / "..." quoting.
function splitFlags(text) {
  const words = [];
  const re = /"([^"]*)"|'([^']*)'|(\S+)/g;
  let m;
  while ((m = re.exec(text)) !== null) {
    words.push(m[1] ?? m[2] ?? m[3]);
  }
  return words;
}

function field(name) {
  return form.elements.namedItem(name);
}

// The predict command line of the form: a flag only where the field differs from the CLI's default.
function commandLine() {
  const args = ["predict"];
  const config = field("config").value.trim();
  args.push("--model", config !== "" ? CONFIG_PATH : field("model").value);
  args.push("--gpu", field("gpu").value, "--batch", field("batch").value, "--seq", field("seq").value);
  const mode = field("mode").value;
  if (mode === "inference") {
    args.push("--inference");
  } else if (mode === "generate") {
    args.push("--generate", field("generate").value || "1");
    if (field("kv-cache").value !== field("kv-cache").dataset.default) {
      args.push("--kv-cache", field("kv-cache").value);
    }
  }
  const optional = ["precision", "optimizer", "checkpointing", "world-size", "tp", "pp", "zero", "fsdp",
                    "lora-rank", "base-weights"];
  for (const name of optional) {
    const f = field(name);
    if (f.value !== f.dataset.default) {
      args.push(`--${name}`, f.value);
    }
  }
  if (field("fsdp2").checked) {
    args.push("--fsdp2");
  }
  args.push(...splitFlags(field("extra").value));
  return { args, config };
}

function quoted(word) {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, "'\\''")}'`;
}

function gib(bytes) {
  return `${(bytes / 2 ** 30).toFixed(2)} GiB`;
}

function showSummary(p) {
  const rows = [
    ["fits", p.fits ? "yes" : "no"],
    ["GPU", `${p.gpu} (${gib(p.total_bytes)})`],
    ["peak reserved", `${gib(p.peak_reserved_bytes)} (${p.peak_reserved_bytes} bytes)`],
    ["peak allocated", `${gib(p.peak_allocated_bytes)} (${p.peak_allocated_bytes} bytes)`],
    ["headroom", `${gib(p.headroom_bytes)} (${p.headroom_percent.toFixed(1)} %)`],
  ];
  const table = document.getElementById("summary");
  table.replaceChildren(...rows.map(([k, v]) => {
    const tr = document.createElement("tr");
    const th = document.createElement("th");
    const td = document.createElement("td");
    th.textContent = k;
    td.textContent = v;
    tr.append(th, td);
    return tr;
  }));
  table.className = p.fits ? "fits" : "does-not-fit";
}

// The form's state as attributes too, so that a saved or dumped copy of the page shows what was run.
function reflectForm() {
  for (const f of form.elements) {
    if (f instanceof HTMLSelectElement) {
      for (const o of f.options) {
        o.toggleAttribute("selected", o.selected);
      }
    } else if (f.type === "checkbox") {
      f.toggleAttribute("checked", f.checked);
    } else if (f instanceof HTMLInputElement && f.type !== "file") {
      f.setAttribute("value", f.value);
    } else if (f instanceof HTMLTextAreaElement) {
      f.textContent = f.value;
    }
  }
}

async function predict() {
  reflectForm();
  const { args, config } = commandLine();
  const shown = args.map((a) => (a === CONFIG_PATH ? "config.json" : a));
  document.getElementById("command").textContent = `vramsim ${shown.map(quoted).join(" ")}`;
  document.getElementById("result").hidden = false;
  const error = document.getElementById("error");
  const report = document.getElementById("report");
  error.hidden = true;
  statusLine.textContent = "simulating…";
  document.body.dataset.state = "running";
  const started = performance.now();
  const files = config !== "" ? { [CONFIG_PATH]: config } : {};
  let run = await runVramsim([...args, "--json", "--html", HTML_PATH], files);
  // predict draws one rank's run: a pipeline with every stage simulated has no single picture (the CLI's own
  // error says so). The numbers are still shown, from a run without --html.
  const noPicture = run.status !== 0 && run.stderr.includes("--html: one rank's run only");
  if (noPicture) {
    run = await runVramsim([...args, "--json"], files);
  }
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  if (run.status !== 0) {
    error.textContent = run.stderr || `vramsim exited with status ${run.status}`;
    error.hidden = false;
    document.getElementById("json").textContent = "";
    document.getElementById("summary").replaceChildren();
    report.hidden = true;
    statusLine.textContent = `failed after ${seconds} s`;
    document.body.dataset.state = "error";
    return;
  }
  document.getElementById("json").textContent = run.stdout;
  showSummary(JSON.parse(run.stdout));
  const download = document.getElementById("download");
  URL.revokeObjectURL(download.href);
  if (noPicture) {
    error.textContent = "No picture: predict draws one pipeline stage; add --pp-stage N to the flags.";
    error.hidden = false;
    report.hidden = true;
    download.removeAttribute("href");
  } else {
    const html = run.fs.readFile(HTML_PATH, { encoding: "utf8" });
    const loaded = new Promise((resolve) => report.addEventListener("load", resolve, { once: true }));
    report.srcdoc = html;
    report.hidden = false;
    await loaded;
    // What the browser drew, for the tests: the report's series (one per category and two lines) and
    // segments, counted in the frame's own DOM (the frame runs no script; allow-same-origin lets us read it).
    const drawn = report.contentDocument;
    report.dataset.series = drawn.querySelectorAll(".series").length;
    report.dataset.segments = drawn.querySelectorAll(".segment").length;
    download.href = URL.createObjectURL(new Blob([html], { type: "text/html" }));
  }
  statusLine.textContent = `simulated in ${seconds} s`;
  document.body.dataset.state = "done";
}

function applyQuery() {
  const query = new URLSearchParams(window.location.search);
  for (const [name, value] of query) {
    const f = field(name);
    if (f === null || f instanceof RadioNodeList) {
      continue;
    }
    if (f.type === "checkbox") {
      f.checked = value !== "" && value !== "0" && value !== "false";
    } else if (f instanceof HTMLSelectElement && ![...f.options].some((o) => o.value === value)) {
      f.add(new Option(value, value));  // e.g. gpu=h100: the CLI's own name matching decides
      f.value = value;
    } else {
      f.value = value;
    }
  }
  return query.get("run") === "1";
}

async function start() {
  const [models, gpus] = await Promise.all([runVramsim(["predict", "--list-models"]),
                                            runVramsim(["predict", "--list-gpus"])]);
  fillSelect(field("model"), firstColumn(models.stdout), "llama-3-8b");
  fillSelect(field("gpu"), firstColumn(gpus.stdout), "H100-80GB");
  document.getElementById("config-file").addEventListener("change", async (event) => {
    const file = event.target.files[0];
    if (file !== undefined) {
      field("config").value = await file.text();
    }
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    predict();
  });
  document.getElementById("predict").disabled = false;
  statusLine.textContent = "ready";
  document.body.dataset.state = "ready";
  if (applyQuery()) {
    await predict();
  }
}

start().catch((e) => {
  statusLine.textContent = `the simulator did not load: ${e}`;
  document.body.dataset.state = "error";
});
