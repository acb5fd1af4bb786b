#!/usr/bin/env node
// The @hanzo/dev launcher: finds the native hanzo-dev binary in the platform package npm
// installed beside this one (@hanzo/dev-<os>-<cpu>-<libc>) and runs it with this process's
// arguments, standard streams and exit status. It adds nothing else: every sandbox, policy and
// record is the native binary's.
'use strict';

const { spawn } = require('node:child_process');
const path = require('node:path');
const fs = require('node:fs');

const SUPPORTED = ['linux-x64-gnu', 'linux-x64-musl', 'linux-arm64-gnu', 'linux-arm64-musl'];

function libc() {
  if (process.platform !== 'linux') return null;
  const report = process.report && process.report.getReport ? process.report.getReport() : null;
  const header = report && (typeof report === 'string' ? JSON.parse(report) : report).header;
  return header && header.glibcVersionRuntime ? 'gnu' : 'musl';
}

function platformKey() {
  const cpu = { x64: 'x64', arm64: 'arm64' }[process.arch] || process.arch;
  const c = libc();
  return c ? `${process.platform}-${cpu}-${c}` : `${process.platform}-${cpu}`;
}

function findBinary() {
  if (process.env.HANZO_DEV_BINARY) return process.env.HANZO_DEV_BINARY;
  const key = platformKey();
  const pkg = `@hanzo/dev-${key}`;
  try {
    const manifest = require.resolve(`${pkg}/package.json`);
    const bin = path.join(path.dirname(manifest), 'bin', 'hanzo-dev');
    if (fs.existsSync(bin)) return bin;
  } catch (_) {
    // Not installed: explained below.
  }
  const lines = [
    `hanzo-dev: no native binary for this platform (${key}).`,
    `The package ${pkg} is not installed${SUPPORTED.includes(key) ? '' : ', and is not built'}.`,
    `Packages are built for: ${SUPPORTED.join(', ')}.`,
    SUPPORTED.includes(key)
      ? 'Reinstall without --no-optional / --omit=optional so npm installs it, or install it by name.'
      : 'Build from source instead: https://github.com/hanzoai/dev (cargo install --path supervisor).',
    'Or point HANZO_DEV_BINARY at a hanzo-dev binary.',
  ];
  process.stderr.write(lines.join('\n') + '\n');
  process.exit(2);
}

const child = spawn(findBinary(), process.argv.slice(2), { stdio: 'inherit' });
// A signal sent to this launcher alone (a service manager's SIGTERM) reaches the binary too;
// the terminal's ^C already goes to both, as they share the foreground process group.
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT']) {
  process.on(sig, () => {
    try { child.kill(sig); } catch (_) { /* already gone */ }
  });
}
child.on('error', (e) => {
  process.stderr.write(`hanzo-dev: cannot run the native binary: ${e.message}\n`);
  process.exit(2);
});
child.on('exit', (code, signal) => {
  if (signal) {
    process.removeAllListeners(signal);
    process.kill(process.pid, signal);
    return;
  }
  process.exit(code === null ? 1 : code);
});
