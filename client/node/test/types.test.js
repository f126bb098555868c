'use strict';
// src/index.d.ts against the code: a TypeScript host's usage compiles under --strict, and the
// declared exports and class members are exactly the runtime's public ones (no stale or missing
// declaration).
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const fs = require('node:fs');
const ts = require('typescript');
const api = require('../src/index.js');

const DECLARATIONS = path.join(__dirname, '..', 'src', 'index.d.ts');

test('a TypeScript host compiles against the declarations with --strict', () => {
  const program = ts.createProgram([path.join(__dirname, 'types', 'usage.ts'), DECLARATIONS], {
    strict: true, noEmit: true, target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.Node16,
    moduleResolution: ts.ModuleResolutionKind.Node16, types: [],
  });
  const diagnostics = ts.getPreEmitDiagnostics(program)
    .filter((d) => !d.file || !d.file.fileName.includes('node_modules'));
  const text = diagnostics.map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n')).join('\n');
  assert.equal(diagnostics.length, 0, text);
});

test('declared exports and class members are the runtime ones', () => {
  const source = ts.createSourceFile('index.d.ts', fs.readFileSync(DECLARATIONS, 'utf8'), ts.ScriptTarget.ES2022, true);
  const values = new Set();
  const members = {};
  for (const statement of source.statements) {
    if (ts.isClassDeclaration(statement)) {
      const name = statement.name.text;
      values.add(name);
      members[name] = { instance: [], static: [] };
      for (const member of statement.members) {
        if (!ts.isMethodDeclaration(member)) continue;
        const isStatic = (ts.getModifiers(member) ?? []).some((m) => m.kind === ts.SyntaxKind.StaticKeyword);
        members[name][isStatic ? 'static' : 'instance'].push(member.name.text);
      }
    } else if (ts.isFunctionDeclaration(statement)) {
      values.add(statement.name.text);
    } else if (ts.isVariableStatement(statement)) {
      for (const d of statement.declarationList.declarations) values.add(d.name.text);
    }
  }
  assert.deepEqual([...values].sort(), Object.keys(api).sort());
  for (const [name, declared] of Object.entries(members)) {
    const cls = api[name];
    const publicNames = (o) => Object.getOwnPropertyNames(o)
      .filter((n) => typeof o[n] === 'function' && n !== 'constructor' && !n.startsWith('_')).sort();
    // An overloaded method is declared once per signature.
    assert.deepEqual([...new Set(declared.instance)].sort(), publicNames(cls.prototype), `${name} instance methods`);
    const statics = Object.getOwnPropertyNames(cls).filter((n) => typeof cls[n] === 'function').sort();
    assert.deepEqual(declared.static.sort(), statics, `${name} static methods`);
  }
});
