/* Decode uncompressed v2 record batches straight into column buffers (Arrow's layout).
 *
 * Why C: a consumer that hands records to a columnar engine (the Spark source) would otherwise
 * make a Python object per record, which costs more than everything else it does. Here one call
 * walks every batch of a fetched partition and fills flat buffers: offsets, timestamps, keys,
 * values and (optionally) headers, each as Arrow's offsets/data/validity buffers, ready for
 * ``pyarrow.Array.from_buffers`` without a copy.
 *
 * The input is bytes from the network: every length is checked against the batch's bounds and
 * any inconsistency raises ValueError (never a read past the buffer). Compressed batches are not
 * handled here: the Python wrapper (strom.record.columns) inflates them first.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define LOG_OVERHEAD 12
#define HEADER_SIZE 61
#define MIN_BATCH_LENGTH (HEADER_SIZE - LOG_OVERHEAD)
#define MIN_RECORD_SIZE 7 /* length, attributes, ts delta, offset delta, key, value, headers */

#define COMPRESSION_MASK 0x07
#define LOG_APPEND_TIME_MASK 0x08
#define TRANSACTIONAL_MASK 0x10
#define CONTROL_MASK 0x20

static int64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}
static int32_t be32(const uint8_t *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     (uint32_t)p[3]);
}
static int16_t be16(const uint8_t *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }

/* ---- growable buffers backed by a bytes object (handed to Python without a copy) ---------- */

typedef struct {
    PyObject *obj; /* bytes */
    char *data;
    Py_ssize_t len, cap;
} Buf;

static int buf_init(Buf *b, Py_ssize_t cap) {
    if (cap < 64) cap = 64;
    b->obj = PyBytes_FromStringAndSize(NULL, cap);
    if (b->obj == NULL) return -1;
    b->data = PyBytes_AS_STRING(b->obj);
    b->len = 0;
    b->cap = cap;
    return 0;
}

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap;
    while (cap < b->len + extra) cap *= 2;
    if (_PyBytes_Resize(&b->obj, cap) < 0) return -1;
    b->data = PyBytes_AS_STRING(b->obj);
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    memcpy(b->data + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

/* The bytes object, trimmed to its length; the Buf no longer owns it. */
static PyObject *buf_finish(Buf *b) {
    if (_PyBytes_Resize(&b->obj, b->len) < 0) return NULL;
    PyObject *o = b->obj;
    b->obj = NULL;
    return o;
}

static void buf_free(Buf *b) { Py_CLEAR(b->obj); }

/* A validity bitmap (LSB first) plus its null count; the bitmap is dropped when nothing is null. */
typedef struct {
    Buf bits;
    Py_ssize_t n, nulls;
} Valid;

static int valid_push(Valid *v, int is_valid) {
    if ((v->n & 7) == 0) {
        uint8_t zero = 0;
        if (buf_put(&v->bits, &zero, 1) < 0) return -1;
    }
    if (is_valid)
        v->bits.data[v->n >> 3] |= (uint8_t)(1u << (v->n & 7));
    else
        v->nulls++;
    v->n++;
    return 0;
}

static PyObject *valid_finish(Valid *v) {
    if (v->nulls == 0) Py_RETURN_NONE;
    return buf_finish(&v->bits);
}

/* A binary (or string) column: int32 offsets, data, validity. */
typedef struct {
    Buf offsets, data;
    Valid valid;
} BinCol;

static int bincol_init(BinCol *c, Py_ssize_t rows, Py_ssize_t bytes) {
    memset(c, 0, sizeof(*c));
    if (buf_init(&c->offsets, (rows + 1) * 4) < 0 || buf_init(&c->data, bytes) < 0 ||
        buf_init(&c->valid.bits, rows / 8 + 1) < 0)
        return -1;
    int32_t zero = 0;
    return buf_put(&c->offsets, &zero, 4);
}

static inline int bincol_push(BinCol *c, const uint8_t *p, int64_t n) {
    if (n >= 0 && buf_put(&c->data, p, (Py_ssize_t)n) < 0) return -1;
    int32_t end = (int32_t)c->data.len;
    if (buf_put(&c->offsets, &end, 4) < 0) return -1;
    return valid_push(&c->valid, n >= 0);
}

static void bincol_free(BinCol *c) {
    buf_free(&c->offsets);
    buf_free(&c->data);
    buf_free(&c->valid.bits);
}

/* (offsets, data, validity or None, null count) */
static PyObject *bincol_finish(BinCol *c) {
    PyObject *o = buf_finish(&c->offsets), *d = NULL, *v = NULL;
    if (o) d = buf_finish(&c->data);
    if (d) v = valid_finish(&c->valid);
    if (!v) {
        Py_XDECREF(o);
        Py_XDECREF(d);
        return NULL;
    }
    return Py_BuildValue("(NNNn)", o, d, v, c->valid.nulls);
}

/* ---- varints ------------------------------------------------------------------------------ */

/* Zig-zag varint (Kafka's signed varint/varlong) at *pos, bounded by end; -1 when malformed. */
static int read_varlong(const uint8_t *buf, Py_ssize_t end, Py_ssize_t *pos, int64_t *out) {
    uint64_t raw = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    for (;;) {
        if (p >= end || shift > 63) return -1;
        uint8_t b = buf[p++];
        raw |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) break;
        shift += 7;
    }
    *pos = p;
    *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
    return 0;
}

static int read_varint(const uint8_t *buf, Py_ssize_t end, Py_ssize_t *pos, int64_t *out) {
    if (read_varlong(buf, end, pos, out) < 0 || *out > INT32_MAX || *out < INT32_MIN) return -1;
    return 0;
}

/* ---- aborted transactions (read_committed) ------------------------------------------------ */

/* Kafka's consumer rule: an aborted transaction (producer id, first offset) from the fetch
 * response applies from the first batch of that producer whose last offset reaches the first
 * offset, until the producer's ABORT marker. Data batches of a producer in that state are
 * skipped whole. */
typedef struct {
    const int64_t *pairs; /* (producer id, first offset), sorted by first offset */
    Py_ssize_t count, next;
    int64_t *active;
    Py_ssize_t n_active;
} Aborts;

static int aborts_contains(Aborts *a, int64_t pid) {
    for (Py_ssize_t i = 0; i < a->n_active; i++)
        if (a->active[i] == pid) return 1;
    return 0;
}

static void aborts_advance(Aborts *a, int64_t last_offset) {
    while (a->next < a->count && a->pairs[2 * a->next + 1] <= last_offset) {
        int64_t pid = a->pairs[2 * a->next];
        if (!aborts_contains(a, pid)) a->active[a->n_active++] = pid;
        a->next++;
    }
}

static void aborts_remove(Aborts *a, int64_t pid) {
    for (Py_ssize_t i = 0; i < a->n_active; i++)
        if (a->active[i] == pid) {
            a->active[i] = a->active[--a->n_active];
            return;
        }
}

/* ---- scan --------------------------------------------------------------------------------- */

static PyObject *corrupt(const char *what, Py_ssize_t pos) {
    PyErr_Format(PyExc_ValueError, "corrupt record batch at byte %zd: %s", pos, what);
    return NULL;
}

/* Frame the complete batches at the front of buf: -1 (error set) on a bad frame. */
static int frame_batch(const uint8_t *buf, Py_ssize_t len, Py_ssize_t pos, Py_ssize_t *next) {
    if (pos + HEADER_SIZE > len) return 0; /* a trailing partial batch */
    int32_t length = be32(buf + pos + 8);
    if (length < MIN_BATCH_LENGTH) {
        corrupt("batch length too small", pos);
        return -1;
    }
    if (pos + LOG_OVERHEAD + (Py_ssize_t)length > len) return 0;
    if (buf[pos + 16] != 2) {
        corrupt("magic is not 2", pos);
        return -1;
    }
    *next = pos + LOG_OVERHEAD + length;
    return 1;
}

PyDoc_STRVAR(scan_doc,
"scan(buf) -> (complete, compressed)\n\n"
"The number of bytes of complete v2 batches at the front of buf, and how many of them are\n"
"compressed. ValueError when a batch cannot be framed.");

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view)) return NULL;
    const uint8_t *buf = view.buf;
    Py_ssize_t len = view.len, pos = 0, next = 0, compressed = 0;
    int r;
    while ((r = frame_batch(buf, len, pos, &next)) == 1) {
        if (be16(buf + pos + 21) & COMPRESSION_MASK) compressed++;
        pos = next;
    }
    PyBuffer_Release(&view);
    if (r < 0) return NULL;
    return Py_BuildValue("(nn)", pos, compressed);
}

/* ---- decode ------------------------------------------------------------------------------- */

typedef struct {
    Buf offsets, timestamps, types;
    BinCol keys, values;
    int with_headers;
    Buf hdr_offsets; /* list offsets into the header entries */
    Valid hdr_valid; /* null list for a record without headers */
    BinCol hkeys, hvalues;
    Py_ssize_t rows;
} Out;

static int out_init(Out *o, Py_ssize_t rows, Py_ssize_t bytes, int with_headers) {
    memset(o, 0, sizeof(*o));
    o->with_headers = with_headers;
    if (buf_init(&o->offsets, rows * 8) < 0 || buf_init(&o->timestamps, rows * 8) < 0 ||
        buf_init(&o->types, rows * 4) < 0 || bincol_init(&o->keys, rows, 64) < 0 ||
        bincol_init(&o->values, rows, bytes) < 0)
        return -1;
    if (with_headers) {
        int32_t zero = 0;
        if (buf_init(&o->hdr_offsets, (rows + 1) * 4) < 0 ||
            buf_init(&o->hdr_valid.bits, rows / 8 + 1) < 0 || bincol_init(&o->hkeys, 64, 64) < 0 ||
            bincol_init(&o->hvalues, 64, 64) < 0 || buf_put(&o->hdr_offsets, &zero, 4) < 0)
            return -1;
    }
    return 0;
}

static void out_free(Out *o) {
    buf_free(&o->offsets);
    buf_free(&o->timestamps);
    buf_free(&o->types);
    bincol_free(&o->keys);
    bincol_free(&o->values);
    buf_free(&o->hdr_offsets);
    buf_free(&o->hdr_valid.bits);
    bincol_free(&o->hkeys);
    bincol_free(&o->hvalues);
}

/* Decode the records section [p, end) of one batch, keeping offsets in [lo, hi). */
static int decode_records(Out *o, const uint8_t *buf, Py_ssize_t p, Py_ssize_t end,
                          int32_t count, int64_t base_offset, int64_t base_ts, int64_t max_ts,
                          int log_append, int64_t lo, int64_t hi) {
    int32_t type = log_append ? 1 : 0;
    for (int32_t i = 0; i < count; i++) {
        int64_t length, ts_delta, off_delta, klen, vlen, nh;
        if (read_varint(buf, end, &p, &length) < 0 || length < MIN_RECORD_SIZE - 1 ||
            p + length > end)
            return corrupt("bad record length", p), -1;
        Py_ssize_t rend = p + (Py_ssize_t)length;
        p += 1; /* record attributes: unused */
        if (read_varlong(buf, rend, &p, &ts_delta) < 0 || read_varint(buf, rend, &p, &off_delta) < 0)
            return corrupt("bad record timestamp or offset delta", p), -1;
        if (read_varint(buf, rend, &p, &klen) < 0 || klen < -1 || p + klen > rend)
            return corrupt("bad key length", p), -1;
        const uint8_t *key = buf + p;
        if (klen > 0) p += (Py_ssize_t)klen;
        if (read_varint(buf, rend, &p, &vlen) < 0 || vlen < -1 || p + vlen > rend)
            return corrupt("bad value length", p), -1;
        const uint8_t *value = buf + p;
        if (vlen > 0) p += (Py_ssize_t)vlen;
        if (read_varint(buf, rend, &p, &nh) < 0 || nh < 0 || nh > (rend - p) / 2)
            return corrupt("bad header count", p), -1;
        /* (unsigned: hostile deltas must not overflow a signed sum) */
        int64_t offset = (int64_t)((uint64_t)base_offset + (uint64_t)off_delta);
        int keep = offset >= lo && offset < hi;
        for (int64_t h = 0; h < nh; h++) {
            int64_t hklen, hvlen;
            if (read_varint(buf, rend, &p, &hklen) < 0 || hklen < 0 || p + hklen > rend)
                return corrupt("bad header key length", p), -1;
            const uint8_t *hk = buf + p;
            p += (Py_ssize_t)hklen;
            if (read_varint(buf, rend, &p, &hvlen) < 0 || hvlen < -1 || p + hvlen > rend)
                return corrupt("bad header value length", p), -1;
            const uint8_t *hv = buf + p;
            if (hvlen > 0) p += (Py_ssize_t)hvlen;
            if (keep && o->with_headers &&
                (bincol_push(&o->hkeys, hk, hklen) < 0 || bincol_push(&o->hvalues, hv, hvlen) < 0))
                return -1;
        }
        if (p != rend) return corrupt("record length does not match its contents", p), -1;
        if (!keep) continue;
        int64_t ms = log_append ? max_ts : (int64_t)((uint64_t)base_ts + (uint64_t)ts_delta);
        int64_t us = (int64_t)((uint64_t)ms * 1000u);
        if (buf_put(&o->offsets, &offset, 8) < 0 || buf_put(&o->timestamps, &us, 8) < 0 ||
            buf_put(&o->types, &type, 4) < 0 || bincol_push(&o->keys, key, klen) < 0 ||
            bincol_push(&o->values, value, vlen) < 0)
            return -1;
        if (o->with_headers) {
            int32_t hend = (int32_t)(o->hkeys.offsets.len / 4 - 1);
            if (buf_put(&o->hdr_offsets, &hend, 4) < 0 || valid_push(&o->hdr_valid, nh > 0) < 0)
                return -1;
        }
        o->rows++;
    }
    if (p != end) return corrupt("bytes left after the batch's last record", p), -1;
    return 0;
}

PyDoc_STRVAR(decode_doc,
"decode(buf, lo, hi, headers, aborted=None) -> tuple\n\n"
"Decode the complete uncompressed v2 batches at the front of buf, keeping the data records\n"
"whose offsets are in [lo, hi). Control batches are skipped; with aborted (packed native\n"
"int64 pairs: producer id, first offset; sorted by first offset), so are the batches of\n"
"aborted transactions. Returns (rows, offsets, timestamps_us, timestamp_types, keys, values,\n"
"headers, next_offset, consumed): keys and values are (offsets, data, validity, nulls);\n"
"headers is None or (list offsets, list validity, nulls, keys, values); next_offset is the\n"
"offset after the last complete batch (-1 if none), consumed its end in buf.");

static PyObject *decode(PyObject *self, PyObject *args) {
    Py_buffer view, aview = {0};
    long long lo, hi;
    int with_headers;
    PyObject *aborted = Py_None;
    if (!PyArg_ParseTuple(args, "y*LLp|O", &view, &lo, &hi, &with_headers, &aborted)) return NULL;
    const uint8_t *buf = view.buf;
    Py_ssize_t len = view.len;
    Aborts ab = {0};
    Out o;
    PyObject *result = NULL;
    memset(&o, 0, sizeof(o));
    if (len > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "records larger than 2 GiB");
        goto done;
    }
    if (aborted != Py_None) {
        if (PyObject_GetBuffer(aborted, &aview, PyBUF_SIMPLE) < 0) goto done;
        if (aview.len % 16) {
            PyErr_SetString(PyExc_ValueError, "aborted must hold (int64, int64) pairs");
            goto done;
        }
        ab.pairs = aview.buf;
        ab.count = aview.len / 16;
        ab.active = PyMem_Malloc(sizeof(int64_t) * (size_t)(ab.count + 1));
        if (ab.active == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }

    /* pass 1: frame the batches and size the buffers by the records they declare */
    Py_ssize_t pos = 0, next = 0, rows = 0;
    int r;
    while ((r = frame_batch(buf, len, pos, &next)) == 1) {
        int16_t attrs = be16(buf + pos + 21);
        int32_t count = be32(buf + pos + 57);
        if (attrs & COMPRESSION_MASK) {
            corrupt("compressed batch (inflate it first)", pos);
            goto done;
        }
        if (count < 0 || count > (next - pos - HEADER_SIZE) / MIN_RECORD_SIZE) {
            corrupt("record count does not fit the batch", pos);
            goto done;
        }
        if (!(attrs & CONTROL_MASK)) rows += count;
        pos = next;
    }
    if (r < 0) goto done;
    Py_ssize_t complete = pos;
    if (out_init(&o, rows, complete, with_headers) < 0) goto done;

    /* pass 2: decode */
    int64_t next_offset = -1;
    for (pos = 0; pos < complete; pos = next) {
        next = pos + LOG_OVERHEAD + be32(buf + pos + 8);
        int64_t base_offset = be64(buf + pos);
        int16_t attrs = be16(buf + pos + 21);
        int64_t last_offset =
            (int64_t)((uint64_t)base_offset + (uint64_t)(int64_t)be32(buf + pos + 23));
        int64_t pid = be64(buf + pos + 43);
        next_offset = (int64_t)((uint64_t)last_offset + 1u);
        if (ab.pairs != NULL && (attrs & TRANSACTIONAL_MASK)) {
            aborts_advance(&ab, last_offset);
            if (attrs & CONTROL_MASK) {
                /* control record key: version (int16), type (int16; 0 = ABORT) */
                Py_ssize_t p = pos + HEADER_SIZE;
                int64_t rlen, skip, klen;
                if (be32(buf + pos + 57) >= 1 && read_varint(buf, next, &p, &rlen) == 0 &&
                    p + 1 < next && (p += 1, read_varlong(buf, next, &p, &skip) == 0) &&
                    read_varint(buf, next, &p, &skip) == 0 &&
                    read_varint(buf, next, &p, &klen) == 0 && klen >= 4 && p + 4 <= next &&
                    be16(buf + p + 2) == 0)
                    aborts_remove(&ab, pid);
                continue;
            }
            if (aborts_contains(&ab, pid)) continue;
        }
        if (attrs & CONTROL_MASK) continue;
        if (last_offset < lo || base_offset >= hi) continue;
        if (decode_records(&o, buf, pos + HEADER_SIZE, next, be32(buf + pos + 57), base_offset,
                           be64(buf + pos + 27), be64(buf + pos + 35),
                           attrs & LOG_APPEND_TIME_MASK, lo, hi) < 0)
            goto done;
    }

    {
        PyObject *offs = buf_finish(&o.offsets), *ts = NULL, *types = NULL, *keys = NULL,
                 *values = NULL, *headers = NULL;
        if (offs) ts = buf_finish(&o.timestamps);
        if (ts) types = buf_finish(&o.types);
        if (types) keys = bincol_finish(&o.keys);
        if (keys) values = bincol_finish(&o.values);
        if (values) {
            if (!with_headers) {
                headers = Py_None;
                Py_INCREF(headers);
            } else {
                PyObject *lo_ = buf_finish(&o.hdr_offsets), *lv = NULL, *hk = NULL, *hv = NULL;
                if (lo_) lv = valid_finish(&o.hdr_valid);
                if (lv) hk = bincol_finish(&o.hkeys);
                if (hk) hv = bincol_finish(&o.hvalues);
                if (hv)
                    headers = Py_BuildValue("(NNnNN)", lo_, lv, o.hdr_valid.nulls, hk, hv);
                else {
                    Py_XDECREF(lo_);
                    Py_XDECREF(lv);
                    Py_XDECREF(hk);
                }
            }
        }
        if (headers)
            result = Py_BuildValue("(nNNNNNNLn)", o.rows, offs, ts, types, keys, values, headers,
                                   (long long)next_offset, complete);
        else {
            Py_XDECREF(offs);
            Py_XDECREF(ts);
            Py_XDECREF(types);
            Py_XDECREF(keys);
            Py_XDECREF(values);
        }
    }

done:
    out_free(&o);
    PyMem_Free(ab.active);
    if (aview.obj) PyBuffer_Release(&aview);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, scan_doc},
    {"decode", decode, METH_VARARGS, decode_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_columns",
    .m_doc = "Decode v2 record batches into column buffers (see strom.record.columns).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__columns(void) { return PyModule_Create(&module); }
