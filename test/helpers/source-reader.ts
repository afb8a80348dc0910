/**
 * Reads what a source file imports, for the architecture test. TypeScript's parser finds the imports, so
 * comments, strings and regular expressions cannot hide one or fake one; then every `import` keyword and
 * every `require` in the file must belong to a form the reader knows, or the file is reported as a problem.
 * A guard that skips what it cannot read is a guard that can be switched off by writing differently.
 */
import ts from 'typescript';

export type ImportForm = 'static' | 'type' | 'side-effect' | 're-export' | 'dynamic' | 'require' | 'import-equals' | 'import-type';

export interface ImportSite {
  spec: string;
  form: ImportForm;
  line: number;
}

export interface ReadResult {
  imports: ImportSite[];
  /** Anything the reader could not classify or parse, as `line N: what`. Empty for a readable file. */
  problems: string[];
}

function scriptKind(file: string): ts.ScriptKind {
  if (file.endsWith('.ts') || file.endsWith('.mts')) return ts.ScriptKind.TS;
  return ts.ScriptKind.JS;
}

/** The string of a module specifier, or undefined when it is computed. */
function literal(node: ts.Node | undefined): string | undefined {
  return node && (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) ? node.text : undefined;
}

export function readImports(file: string, text: string): ReadResult {
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, scriptKind(file));
  const imports: ImportSite[] = [];
  const problems: string[] = [];
  const lineOf = (pos: number) => sf.getLineAndCharacterOfPosition(pos).line + 1;
  // parseDiagnostics is not public API, but it is what "the parser could not read this file" means.
  for (const d of (sf as unknown as { parseDiagnostics?: ts.Diagnostic[] }).parseDiagnostics ?? []) {
    problems.push(`line ${lineOf(d.start ?? 0)}: does not parse: ${ts.flattenDiagnosticMessageText(d.messageText, ' ')}`);
  }
  /** Token positions of the `import` keywords and `require` identifiers that a known form accounts for. */
  const accounted = new Set<number>();
  const add = (spec: string | undefined, form: ImportForm, node: ts.Node, keywordPos: number) => {
    accounted.add(keywordPos);
    if (spec === undefined) problems.push(`line ${lineOf(node.getStart(sf))}: ${form} with a computed specifier: ${node.getText(sf).slice(0, 80)}`);
    else imports.push({ spec, form, line: lineOf(node.getStart(sf)) });
  };
  const keyword = (node: ts.Node, kind: ts.SyntaxKind) => node.getChildren(sf).find((c) => c.kind === kind)?.getStart(sf) ?? -1;

  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node)) {
      const clause = node.importClause;
      add(literal(node.moduleSpecifier), clause ? (clause.isTypeOnly ? 'type' : 'static') : 'side-effect', node, keyword(node, ts.SyntaxKind.ImportKeyword));
    } else if (ts.isExportDeclaration(node) && node.moduleSpecifier) {
      add(literal(node.moduleSpecifier), 're-export', node, -1);
    } else if (ts.isImportEqualsDeclaration(node)) {
      const ref = node.moduleReference;
      if (ts.isExternalModuleReference(ref)) {
        add(literal(ref.expression), 'import-equals', node, keyword(node, ts.SyntaxKind.ImportKeyword));
        accounted.add(ref.getChildren(sf).find((c) => c.kind === ts.SyntaxKind.RequireKeyword)?.getStart(sf) ?? -1);
      } else accounted.add(keyword(node, ts.SyntaxKind.ImportKeyword)); // `import x = A.B`: a namespace alias
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      add(node.arguments.length === 1 ? literal(node.arguments[0]) : undefined, 'dynamic', node, node.expression.getStart(sf));
    } else if (ts.isCallExpression(node) && ts.isIdentifier(node.expression) && node.expression.text === 'require') {
      add(node.arguments.length === 1 ? literal(node.arguments[0]) : undefined, 'require', node, node.expression.getStart(sf));
    } else if (ts.isImportTypeNode(node)) {
      const arg = node.argument;
      add(ts.isLiteralTypeNode(arg) ? literal(arg.literal) : undefined, 'import-type', node, keyword(node, ts.SyntaxKind.ImportKeyword));
    } else if (ts.isMetaProperty(node) && node.keywordToken === ts.SyntaxKind.ImportKeyword) {
      accounted.add(node.getStart(sf)); // import.meta is not an import
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);

  // Every token the parser saw: an `import` or `require` no known form accounted for is a form we cannot read.
  const tokens = (node: ts.Node): void => {
    for (const c of node.getChildren(sf)) {
      const isRequire = c.kind === ts.SyntaxKind.RequireKeyword || (ts.isIdentifier(c) && c.text === 'require');
      if ((c.kind === ts.SyntaxKind.ImportKeyword || isRequire) && !accounted.has(c.getStart(sf))) {
        problems.push(`line ${lineOf(c.getStart(sf))}: an import form the reader does not know: ${c.parent.getText(sf).slice(0, 80)}`);
      }
      tokens(c);
    }
  };
  tokens(sf);
  return { imports, problems };
}

export interface IncludeSite {
  /** The quoted name of a local include, or the bracketed name of a system one. */
  name: string;
  local: boolean;
  line: number;
}

/** The #include lines of a C source; any #include line of another shape is a problem. */
export function readIncludes(text: string): { includes: IncludeSite[]; problems: string[] } {
  const includes: IncludeSite[] = [];
  const problems: string[] = [];
  text.split('\n').forEach((l, i) => {
    if (!/^\s*#\s*include\b/.test(l)) return;
    const m = /^\s*#\s*include\s*(?:"([^"]+)"|<([^>]+)>)\s*(?:\/\*.*\*\/\s*|\/\/.*)?$/.exec(l);
    if (!m) problems.push(`line ${i + 1}: an #include the reader does not know: ${l.trim()}`);
    else includes.push({ name: (m[1] ?? m[2]) as string, local: m[1] !== undefined, line: i + 1 });
  });
  return { includes, problems };
}
