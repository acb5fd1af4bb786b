#!/usr/bin/env node
// @hanzo/repl was renamed to @hanzo/dev (HIP-0301 §17). Say so once, then run hanzo-dev.
'use strict';
if (!process.env.HANZO_REPL_NO_DEPRECATION) {
  process.stderr.write(
    'hanzo-repl is deprecated: it is now hanzo-dev (npm install -g @hanzo/dev). Running hanzo-dev.\n'
  );
}
require('@hanzo/dev/bin/hanzo-dev.js');
