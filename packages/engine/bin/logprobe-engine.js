#!/usr/bin/env node
// `logprobe-engine --sim|--llama …`: the engines' own executable (what `logprobe engine` runs).
import { runEngineCli } from '../dist/index.js';

process.exitCode = await runEngineCli(process.argv.slice(2));
