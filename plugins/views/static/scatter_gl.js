// The embedding scatter drawn by the GPU (WebGL 1): every point in one gl.POINTS draw call and,
// with trails on, every trail behind them in one gl.LINES draw call on the same canvas.
//
// Per point two positions (snapshots i and i + 1, in the snapshot's spread units) and a colour
// index; they are uploaded when the pair of snapshots (or the colouring) changes, never per
// frame. A frame only sets the fraction between the two snapshots, a uniform: the vertex
// shader interpolates, clamps to the frame's edge and maps to the canvas exactly as
// scatter.js's screenPositions does (PLACE, shared by both programs); the fragment shader looks
// the colour up in a palette texture holding the colours of colours.js. A trail (as scatter.js's
// drawTrails) is the segments between snapshots max(0, i - 3) .. i, both ends fixed, then one
// from snapshot i to where the point is now: its far end is (i, i + 1) at the same fraction.

// Where a point lies at u_fraction between two snapshots, in clip space: clamped to the frame's
// edge, mapped to the canvas as scatter.js's screenPositions does.
const PLACE = `
uniform float u_fraction;
uniform vec4 u_bounds;   // x0, x1, y0, y1 of the frame, in spreads
uniform vec3 u_mapping;  // scale, left, top: frame to canvas (CSS pixels)
uniform vec2 u_size;     // canvas width, height (CSS pixels)
vec4 place(vec2 from, vec2 to) {
  vec2 p = clamp(from + (to - from) * u_fraction, u_bounds.xz, u_bounds.yw);
  vec2 s = vec2(u_mapping.y + (p.x - u_bounds.x) * u_mapping.x,
                u_mapping.z + (u_bounds.w - p.y) * u_mapping.x);
  return vec4(2.0 * s.x / u_size.x - 1.0, 1.0 - 2.0 * s.y / u_size.y, 0.0, 1.0);
}`;
const PLACE_UNIFORMS = ['u_fraction', 'u_bounds', 'u_mapping', 'u_size'];

const VERTEX_SHADER = PLACE + `
attribute vec2 a_from;
attribute vec2 a_to;
attribute float a_colour;
uniform float u_pointSize;
varying float v_colour;
void main() {
  gl_Position = place(a_from, a_to);
  gl_PointSize = u_pointSize;
  v_colour = a_colour;
}`;

const FRAGMENT_SHADER = `
precision mediump float;
uniform sampler2D u_palette;
uniform float u_paletteSize;
varying float v_colour;
void main() {
  gl_FragColor = texture2D(u_palette, vec2((v_colour + 0.5) / u_paletteSize, 0.5));
}`;

const TRAIL_VERTEX_SHADER = PLACE + `
attribute vec2 a_from;
attribute vec2 a_to;
void main() { gl_Position = place(a_from, a_to); }`;

const TRAIL_FRAGMENT_SHADER = `
precision mediump float;
uniform vec4 u_colour;
void main() { gl_FragColor = u_colour; }`;

// drawTrails's rgba(120,120,120,0.35), premultiplied (the context's alpha is).
const TRAIL_COLOUR = [0.35 * 120 / 255, 0.35 * 120 / 255, 0.35 * 120 / 255, 0.35];
const ATTRIBUTES = ['a_from', 'a_to', 'a_colour']; // at locations 0, 1, 2 in both programs
const FLOATS_PER_POINT = 5; // from x, y; to x, y; colour index
const FLOATS_PER_VERTEX = 4; // of a trail: from x, y; to x, y
const TRAIL_SNAPSHOTS = 3; // a trail starts this many snapshots before snapshot i

function compile(gl, type, source) {
  const shader = gl.createShader(type);
  gl.shaderSource(shader, source);
  gl.compileShader(shader);
  if (!gl.getShaderParameter(shader, gl.COMPILE_STATUS)) throw new Error(gl.getShaderInfoLog(shader));
  return shader;
}

/** The program of the two shaders; ``at``: where its attributes and ``uniforms`` are. */
function linkProgram(gl, vertex, fragment, uniforms) {
  const program = gl.createProgram();
  gl.attachShader(program, compile(gl, gl.VERTEX_SHADER, vertex));
  gl.attachShader(program, compile(gl, gl.FRAGMENT_SHADER, fragment));
  ATTRIBUTES.forEach((name, i) => gl.bindAttribLocation(program, i, name));
  gl.linkProgram(program);
  if (!gl.getProgramParameter(program, gl.LINK_STATUS)) throw new Error(gl.getProgramInfoLog(program));
  const at = {};
  ATTRIBUTES.forEach((name, i) => { at[name] = i; });
  for (const name of [...PLACE_UNIFORMS, ...uniforms]) at[name] = gl.getUniformLocation(program, name);
  return { program, at };
}

/** Use ``program`` with PLACE's uniforms set: ``fraction`` of the way, ``e``'s frame, ``mapping``. */
function usePlace(gl, { program, at }, fraction, e, mapping, width, height) {
  const [x0, x1, y0, y1] = e.bounds;
  gl.useProgram(program);
  gl.uniform1f(at.u_fraction, fraction);
  gl.uniform4f(at.u_bounds, x0, x1, y0, y1);
  gl.uniform3f(at.u_mapping, mapping.scale, mapping.left, mapping.top);
  gl.uniform2f(at.u_size, width, height);
}

/** Draw ``count`` vertices of ``buffer`` (``floats`` per vertex, ``layout``: [attribute, n]...). */
function drawBuffer(gl, mode, buffer, floats, layout, count) {
  gl.bindBuffer(gl.ARRAY_BUFFER, buffer);
  let offset = 0;
  for (const [name, n] of layout) {
    const i = ATTRIBUTES.indexOf(name);
    gl.enableVertexAttribArray(i);
    gl.vertexAttribPointer(i, n, gl.FLOAT, false, 4 * floats, 4 * offset);
    offset += n;
  }
  gl.drawArrays(mode, 0, count);
  for (const [name] of layout) gl.disableVertexAttribArray(ATTRIBUTES.indexOf(name));
}

/**
 * The trails of an embedding's points, drawn by WebGL (see the top of this file): their
 * segments uploaded once per snapshot i, the last one's far end placed by the vertex shader.
 */
class GLTrails {
  constructor(gl) {
    this.gl = gl;
    this.linked = linkProgram(gl, TRAIL_VERTEX_SHADER, TRAIL_FRAGMENT_SHADER, ['u_colour']);
    this.buffer = gl.createBuffer();
    this.data = new Float32Array(0); // kept between uploads: 12.8 MB at 100,000 points
    this.uploaded = null; // what the buffer holds: {e, i, to, count}
  }

  /** Upload the trails at snapshot ``i`` of ``e`` (``to``: the next); segments not finite are left out. */
  upload(e, i, to) {
    const n = e.ids.length, start = Math.max(0, i - TRAIL_SNAPSHOTS);
    const size = 2 * FLOATS_PER_VERTEX * (i - start + 1) * n;
    if (this.data.length < size) this.data = new Float32Array(size);
    const data = this.data;
    let o = 0;
    const segment = (a, b, c, k) => { // from snapshot a (fixed) to b at the fraction towards c
      const ax = a[2 * k], ay = a[2 * k + 1], bx = b[2 * k], by = b[2 * k + 1], cx = c[2 * k], cy = c[2 * k + 1];
      if (!(Number.isFinite(ax + ay + bx + by + cx + cy))) return;
      data[o] = ax; data[o + 1] = ay; data[o + 2] = ax; data[o + 3] = ay;
      data[o + 4] = bx; data[o + 5] = by; data[o + 6] = cx; data[o + 7] = cy;
      o += 2 * FLOATS_PER_VERTEX;
    };
    const f = e.frames;
    for (let k = 0; k < n; k++) {
      for (let s = start + 1; s <= i; s++) segment(f[s - 1], f[s], f[s], k);
      segment(f[i], f[i], f[to], k);
    }
    const gl = this.gl;
    gl.bindBuffer(gl.ARRAY_BUFFER, this.buffer);
    gl.bufferData(gl.ARRAY_BUFFER, data.subarray(0, o), gl.STATIC_DRAW);
    this.uploaded = { e, i, to, count: o / FLOATS_PER_VERTEX };
  }

  /** Draw ``e``'s trails at snapshot ``i`` (``to``: the next) ``fraction`` of the way to ``to``. */
  draw(e, i, to, fraction, mapping, width, height) {
    const gl = this.gl, u = this.uploaded;
    if (!u || u.e !== e || u.i !== i || u.to !== to) this.upload(e, i, to);
    usePlace(gl, this.linked, fraction, e, mapping, width, height);
    gl.uniform4f(this.linked.at.u_colour, ...TRAIL_COLOUR);
    gl.enable(gl.BLEND);
    gl.blendFunc(gl.ONE, gl.ONE_MINUS_SRC_ALPHA);
    drawBuffer(gl, gl.LINES, this.buffer, FLOATS_PER_VERTEX, [['a_from', 2], ['a_to', 2]], this.uploaded.count);
    gl.disable(gl.BLEND);
  }
}

/** The CSS colours as RGBA bytes (any CSS colour: hex, rgb(), hsl()). */
export function colourBytes(colours) {
  const ctx = document.createElement('canvas').getContext('2d');
  const out = new Uint8Array(4 * colours.length);
  colours.forEach((c, i) => {
    ctx.fillStyle = '#000';
    ctx.fillStyle = c; // read back as #rrggbb
    const hex = ctx.fillStyle;
    for (let k = 0; k < 3; k++) out[4 * i + k] = parseInt(hex.slice(1 + 2 * k, 3 + 2 * k), 16);
    out[4 * i + 3] = 255;
  });
  return out;
}

/** The points in drawing order: by colour (the last colour on top), as the 2-D canvas draws them. */
export function colourOrder(bucket, count) {
  const starts = new Int32Array(count + 1);
  for (let i = 0; i < bucket.length; i++) starts[bucket[i] + 1]++;
  for (let c = 0; c < count; c++) starts[c + 1] += starts[c];
  const order = new Int32Array(bucket.length);
  for (let i = 0; i < bucket.length; i++) order[starts[bucket[i]]++] = i;
  return order;
}

/**
 * The points of an embedding on a WebGL canvas. ``GLPoints.create(canvas)`` is null where the
 * browser has no WebGL (the caller then draws on a 2-D canvas).
 */
export class GLPoints {
  /** Whether the browser draws WebGL on the CPU (SwiftShader, llvmpipe): no GPU behind it. */
  get software() {
    const info = this.gl.getExtension('WEBGL_debug_renderer_info');
    const name = info ? String(this.gl.getParameter(info.UNMASKED_RENDERER_WEBGL)) : '';
    return /swiftshader|llvmpipe|softpipe|software/i.test(name);
  }

  static create(canvas) {
    const options = { alpha: true, antialias: false, premultipliedAlpha: true, depth: false };
    const gl = canvas.getContext('webgl', options) || canvas.getContext('experimental-webgl', options);
    return gl ? new GLPoints(gl) : null;
  }

  constructor(gl) {
    this.gl = gl;
    this.linked = linkProgram(gl, VERTEX_SHADER, FRAGMENT_SHADER, ['u_pointSize', 'u_palette', 'u_paletteSize']);
    this.buffer = gl.createBuffer();
    this.palette = gl.createTexture();
    this.paletteSize = 1;
    this.colours = { bucket: new Int32Array(0), order: new Int32Array(0) };
    this.uploaded = null; // what the buffer holds: {e, from, to, colours, count}
    this.last = null; // the last draw's arguments (to draw again before reading a pixel)
    this.trails = null; // a GLTrails, made when first shown
  }

  /** Colour point k with ``colours[bucket[k]]`` (CSS colours). */
  setColours(bucket, colours) {
    const gl = this.gl;
    this.colours = { bucket, order: colourOrder(bucket, colours.length) };
    this.paletteSize = colours.length;
    gl.bindTexture(gl.TEXTURE_2D, this.palette);
    gl.texImage2D(gl.TEXTURE_2D, 0, gl.RGBA, colours.length, 1, 0, gl.RGBA, gl.UNSIGNED_BYTE,
      colourBytes(colours));
    for (const p of [gl.TEXTURE_MIN_FILTER, gl.TEXTURE_MAG_FILTER]) gl.texParameteri(gl.TEXTURE_2D, p, gl.NEAREST);
    for (const p of [gl.TEXTURE_WRAP_S, gl.TEXTURE_WRAP_T]) gl.texParameteri(gl.TEXTURE_2D, p, gl.CLAMP_TO_EDGE);
  }

  /** Upload snapshots ``from`` and ``to`` of ``e`` (points with a coordinate not finite are left out). */
  upload(e, from, to) {
    const { order, bucket } = this.colours;
    const a = e.frames[from], b = e.frames[to];
    const data = new Float32Array(FLOATS_PER_POINT * order.length);
    let count = 0;
    for (let j = 0; j < order.length; j++) {
      const k = order[j];
      const ax = a[2 * k], ay = a[2 * k + 1], bx = b[2 * k], by = b[2 * k + 1];
      if (!(Number.isFinite(ax) && Number.isFinite(ay) && Number.isFinite(bx) && Number.isFinite(by))) continue;
      const o = FLOATS_PER_POINT * count++;
      data[o] = ax; data[o + 1] = ay; data[o + 2] = bx; data[o + 3] = by; data[o + 4] = bucket[k];
    }
    const gl = this.gl;
    gl.bindBuffer(gl.ARRAY_BUFFER, this.buffer);
    gl.bufferData(gl.ARRAY_BUFFER, data.subarray(0, FLOATS_PER_POINT * count), gl.STATIC_DRAW);
    this.uploaded = { e, from, to, colours: this.colours, count };
  }

  /**
   * Draw embedding ``e`` at fractional snapshot index ``position`` with ``mapping``
   * (scatter.js frameMapping) on a ``width`` x ``height`` canvas, points ``size`` CSS pixels
   * wide, with their ``trails`` (a boolean) behind them; how many points were drawn.
   */
  draw(e, position, mapping, width, height, size, trails = false) {
    const gl = this.gl;
    const from = Math.floor(position), to = Math.min(from + 1, e.frames.length - 1);
    const u = this.uploaded;
    if (!u || u.e !== e || u.from !== from || u.to !== to || u.colours !== this.colours) this.upload(e, from, to);
    this.last = [e, position, mapping, width, height, size, trails];
    gl.viewport(0, 0, gl.canvas.width, gl.canvas.height);
    gl.clearColor(0, 0, 0, 0);
    gl.clear(gl.COLOR_BUFFER_BIT);
    if (trails) {
      this.trails = this.trails || new GLTrails(gl);
      this.trails.draw(e, from, to, position - from, mapping, width, height);
    }
    const at = this.linked.at;
    usePlace(gl, this.linked, position - from, e, mapping, width, height);
    gl.uniform1f(at.u_pointSize, size * gl.canvas.width / width);
    gl.activeTexture(gl.TEXTURE0);
    gl.bindTexture(gl.TEXTURE_2D, this.palette);
    gl.uniform1i(at.u_palette, 0);
    gl.uniform1f(at.u_paletteSize, this.paletteSize);
    drawBuffer(gl, gl.POINTS, this.buffer, FLOATS_PER_POINT, [['a_from', 2], ['a_to', 2], ['a_colour', 1]],
      this.uploaded.count);
    return this.uploaded.count;
  }

  /** The RGBA bytes at canvas pixel (x, y) (device pixels from the top left), drawn again to read. */
  pixel(x, y) {
    const gl = this.gl;
    if (this.last) this.draw(...this.last);
    const out = new Uint8Array(4);
    gl.readPixels(x, gl.canvas.height - 1 - y, 1, 1, gl.RGBA, gl.UNSIGNED_BYTE, out);
    return Array.from(out);
  }
}
