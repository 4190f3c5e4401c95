/**
 * rawValueAt returns the exact text of the JSON value at path (object keys,
 * outermost first) inside the JSON text json, or undefined when there is
 * none. The admission check hashes a tool.call card's content as stored
 * (docs/protocol.md §5.7, step 6): JSON.parse would lose its bytes (key
 * order is kept, but number text and escapes are not), so the SDK slices
 * the reply's text instead.
 */
export function rawValueAt(json: string, path: string[]): string | undefined {
  let i = ws(json, 0);
  for (const key of path) {
    if (json[i] !== "{") return undefined;
    i = ws(json, i + 1);
    let found = false;
    while (i < json.length && json[i] !== "}") {
      const kEnd = skipString(json, i);
      const k = JSON.parse(json.slice(i, kEnd)) as string;
      i = ws(json, kEnd);
      if (json[i] !== ":") throw new SyntaxError(`rawjson: ':' expected at offset ${i}`);
      i = ws(json, i + 1);
      if (k === key) {
        found = true;
        break;
      }
      i = ws(json, skipValue(json, i));
      if (json[i] === ",") i = ws(json, i + 1);
    }
    if (!found) return undefined;
  }
  return json.slice(i, skipValue(json, i));
}

function ws(s: string, i: number): number {
  while (i < s.length && (s[i] === " " || s[i] === "\n" || s[i] === "\r" || s[i] === "\t")) i++;
  return i;
}

function skipString(s: string, i: number): number {
  if (s[i] !== '"') throw new SyntaxError(`rawjson: string expected at offset ${i}`);
  i++;
  while (i < s.length) {
    const c = s[i];
    if (c === "\\") i += 2;
    else if (c === '"') return i + 1;
    else i++;
  }
  throw new SyntaxError("rawjson: unterminated string");
}

function skipValue(s: string, i: number): number {
  const c = s[i];
  if (c === '"') return skipString(s, i);
  if (c === "{" || c === "[") {
    const close = c === "{" ? "}" : "]";
    i = ws(s, i + 1);
    while (i < s.length && s[i] !== close) {
      if (c === "{") {
        i = ws(s, skipString(s, i));
        if (s[i] !== ":") throw new SyntaxError(`rawjson: ':' expected at offset ${i}`);
        i = ws(s, i + 1);
      }
      i = ws(s, skipValue(s, i));
      if (s[i] === ",") i = ws(s, i + 1);
    }
    if (s[i] !== close) throw new SyntaxError(`rawjson: '${close}' expected at offset ${i}`);
    return i + 1;
  }
  let j = i;
  while (j < s.length && !",}] \n\r\t".includes(s[j])) j++;
  if (j === i) throw new SyntaxError(`rawjson: value expected at offset ${i}`);
  return j;
}
