/* The per-file work of a data socket reader (aifs.client), in C: finding its own answer or one
 * on the mount's answer board, checking its stamp against the change table, assembling the
 * file from its blocks, every object checked against its checksum, and keeping the answer.
 * In Python these steps cost a reader more than the pread of a small file itself.
 *
 * The formats are those the Python side writes: the board record of aifs.bypass.board, the
 * counters of aifs.bypass.changes, the block tuples of aifs.client.assemble. Nothing here
 * writes to shared memory, and nothing read from it is trusted before its hash matches.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "board records and counters are little-endian words read in place"
#endif

#define LENGTH_BITS 24
#define MAX_RECORD ((1u << LENGTH_BITS) - 1)
#define HEAD_SIZE 28 /* <QQIHHI: hash of the rest, size, block size, path bytes, blocks, counters */
#define FIELDS 7     /* of a block: index, offset, length, checksum, segment, at, object */
#define STACK_RECORD 4096

static uint64_t load64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint32_t load32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint16_t load16(const unsigned char *p) { uint16_t v; memcpy(&v, p, 2); return v; }

/* An aligned word another process stores to: read whole, never torn. */
static uint64_t shared64(const unsigned char *p) { return __atomic_load_n((const uint64_t *)p, __ATOMIC_RELAXED); }

static int arguments(const char *name, Py_ssize_t given, Py_ssize_t wanted) {
    if (given == wanted) return 1;
    PyErr_Format(PyExc_TypeError, "%s takes %zd arguments (%zd given)", name, wanted, given);
    return 0;
}

/* -- the answer board --------------------------------------------------------------------- */

static PyObject *words_tuple(const unsigned char *words, Py_ssize_t count, int with_none) {
    PyObject *tuple = PyTuple_New(count + with_none);
    if (tuple == NULL) return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *number = PyLong_FromUnsignedLongLong(load64(words + 8 * i));
        if (number == NULL) { Py_DECREF(tuple); return NULL; }
        PyTuple_SET_ITEM(tuple, i, number);
    }
    if (with_none) PyTuple_SET_ITEM(tuple, count, Py_NewRef(Py_None));
    return tuple;
}

/* The kept answer of a record whose hash and path were checked. */
static PyObject *posted(const unsigned char *body, Py_ssize_t blocks, Py_ssize_t counters) {
    const unsigned char *fields = body + HEAD_SIZE, *stamp = fields + 8 * FIELDS * blocks;
    PyObject *block_tuple = PyTuple_New(blocks);
    if (block_tuple == NULL) return NULL;
    for (Py_ssize_t i = 0; i < blocks; i++) {
        PyObject *block = words_tuple(fields + 8 * FIELDS * i, FIELDS, 1);
        if (block == NULL) { Py_DECREF(block_tuple); return NULL; }
        PyTuple_SET_ITEM(block_tuple, i, block);
    }
    PyObject *items[5] = {PyLong_FromUnsignedLongLong(load64(body + 8)), PyLong_FromUnsignedLong(load32(body + 16)),
                          block_tuple, words_tuple(stamp, counters, 0), words_tuple(stamp + 8 * counters, counters, 0)};
    PyObject *result = PyTuple_New(5);
    for (int i = 0; i < 5; i++) {
        if (result != NULL && items[i] != NULL) PyTuple_SET_ITEM(result, i, items[i]);
        else { Py_CLEAR(result); Py_XDECREF(items[i]); }
    }
    return result;
}

/* The answer in `body` (a copy of `length` bytes) if it is whole and for `path`, else None. */
static PyObject *checked_record(const unsigned char *body, uint64_t length, const char *path, Py_ssize_t path_length) {
    uint64_t path_bytes = load16(body + 20), blocks = load16(body + 22), counters = load32(body + 24);
    uint64_t expected = HEAD_SIZE + 8 * (FIELDS * blocks + 2 * counters) + path_bytes;
    if (expected != length || path_bytes != (uint64_t)path_length
            || memcmp(body + length - path_bytes, path, path_bytes) != 0
            || XXH3_64bits(body + 8, length - 8) != load64(body))
        Py_RETURN_NONE;
    return posted(body, (Py_ssize_t)blocks, (Py_ssize_t)counters);
}

/* The answer the record `slot` points at, if it is whole and for `path`, else None. */
static PyObject *record_in(const unsigned char *map, uint64_t size, uint64_t ring_at, uint64_t slot,
                           const char *path, Py_ssize_t path_length) {
    uint64_t entry = shared64(map + 8 * slot);
    uint64_t at = ring_at + (entry >> LENGTH_BITS), length = entry & MAX_RECORD;
    if (length < HEAD_SIZE || at + length > size) Py_RETURN_NONE;
    unsigned char stack[STACK_RECORD];
    unsigned char *body = length <= STACK_RECORD ? stack : PyMem_Malloc(length);
    if (body == NULL) return PyErr_NoMemory();
    memcpy(body, map + at, length); /* a copy: what is checked is what is used */
    PyObject *result = checked_record(body, length, path, path_length);
    if (body != stack) PyMem_Free(body);
    return result;
}

/* The kept answer of the newest whole record posted for `path` on `board` (a map of the given
 * layout), else None; NULL on error. */
static PyObject *board_look(PyObject *board_object, PyObject *slots_object, PyObject *ring_at_object,
                            PyObject *path_object) {
    Py_ssize_t slots = PyLong_AsSsize_t(slots_object), ring_at = PyLong_AsSsize_t(ring_at_object);
    const char *path;
    Py_ssize_t path_length;
    Py_buffer board;
    if (PyErr_Occurred() || PyBytes_AsStringAndSize(path_object, (char **)&path, &path_length) < 0) return NULL;
    if (PyObject_GetBuffer(board_object, &board, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = Py_NewRef(Py_None);
    if (slots <= 0 || (slots & (slots - 1)) != 0 || ring_at != slots * 8 || ring_at > board.len) {
        PyErr_SetString(PyExc_ValueError, "the board's layout does not fit its map");
        Py_CLEAR(result);
    }
    uint64_t digest = XXH3_64bits(path, (size_t)path_length), mask = (uint64_t)(slots - 1);
    uint64_t candidates[2] = {digest & mask, (digest >> 32) & mask}; /* Layout.slots_of */
    for (int i = 0; i < 2 && result == Py_None; i++) {
        Py_DECREF(result);
        result = record_in(board.buf, (uint64_t)board.len, (uint64_t)ring_at, candidates[i], path, path_length);
    }
    PyBuffer_Release(&board);
    return result;
}

static PyObject *look(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (!arguments("look", nargs, 4)) return NULL;
    return board_look(args[0], args[1], args[2], args[3]);
}

/* -- the change table ----------------------------------------------------------------------- */

/* 1 when the counters at `slots` show `values`, 0 when not (or a slot is outside the table), -1
 * on error. */
static int counters_show(PyObject *table, PyObject *slots, PyObject *values) {
    if (!PyTuple_Check(slots) || !PyTuple_Check(values) || PyTuple_GET_SIZE(slots) != PyTuple_GET_SIZE(values)) {
        PyErr_SetString(PyExc_TypeError, "a stamp is two tuples of one length: counters and values");
        return -1;
    }
    Py_buffer counters;
    if (PyObject_GetBuffer(table, &counters, PyBUF_SIMPLE) < 0) return -1;
    int shown = 1;
    uint64_t count = (uint64_t)counters.len / 8;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(slots) && shown == 1; i++) {
        uint64_t slot = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(slots, i));
        uint64_t value = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(values, i));
        if (PyErr_Occurred()) shown = -1;
        else if (slot >= count) shown = 0;
        else shown = shared64((const unsigned char *)counters.buf + 8 * slot) == value;
    }
    PyBuffer_Release(&counters);
    return shown;
}

static PyObject *shows(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (!arguments("shows", nargs, 3)) return NULL;
    int shown = counters_show(args[0], args[1], args[2]);
    if (shown < 0) return NULL;
    return PyBool_FromLong(shown);
}

/* -- assembling a file -------------------------------------------------------------------- */

typedef struct {
    uint64_t index, offset, length, checksum, at, object;
    PyObject *segment; /* an int, or None for an object sent inline */
    PyObject *data;    /* the inline object's bytes, or None */
} Block;

static int parse_block(PyObject *tuple, Block *b) {
    if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) != FIELDS + 1) {
        PyErr_SetString(PyExc_TypeError, "a block is a tuple of 8 fields");
        return -1;
    }
    uint64_t *numbers[] = {&b->index, &b->offset, &b->length, &b->checksum, NULL, &b->at, &b->object};
    for (int i = 0; i < FIELDS; i++)
        if (numbers[i] != NULL) *numbers[i] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(tuple, i));
    b->segment = PyTuple_GET_ITEM(tuple, 4);
    b->data = PyTuple_GET_ITEM(tuple, 7);
    if (b->data != Py_None && !PyBytes_Check(b->data)) {
        PyErr_SetString(PyExc_TypeError, "a block's inline object is bytes");
        return -1;
    }
    return PyErr_Occurred() ? -1 : 0;
}

/* pread that goes on after a signal whose handler did not raise; -1 with an exception set when
 * one did. A read that fails otherwise reads nothing: its object then fails its checksum. */
static Py_ssize_t read_at(long fd, unsigned char *into, uint64_t length, uint64_t at) {
    ssize_t got;
    for (;;) {
        Py_BEGIN_ALLOW_THREADS
        got = pread((int)fd, into, length, (off_t)at);
        Py_END_ALLOW_THREADS
        if (got >= 0 || errno != EINTR) break;
        if (PyErr_CheckSignals() < 0) return -1;
    }
    return got < 0 ? 0 : got;
}

/* The object of `b`, checked: 1 with *object pointing at its `*length` bytes (inline, or read
 * into `into` when that holds b->object bytes, else into a buffer left in *owned), 0 when it
 * does not match its checksum, -1 on error. */
static int object_of(const Block *b, PyObject *fds, unsigned char *into, const unsigned char **object,
                     uint64_t *length, unsigned char **owned) {
    if (b->data != Py_None) {
        *object = (const unsigned char *)PyBytes_AS_STRING(b->data);
        *length = (uint64_t)PyBytes_GET_SIZE(b->data);
        return XXH3_64bits(*object, *length) == b->checksum;
    }
    PyObject *fd_object = b->segment == Py_None ? NULL : PyDict_GetItemWithError(fds, b->segment);
    if (fd_object == NULL && PyErr_Occurred()) return -1;
    *object = into;
    *length = 0;
    if (fd_object != NULL) {
        long fd = PyLong_AsLong(fd_object);
        if (fd == -1 && PyErr_Occurred()) return -1;
        if (into == NULL) {
            *owned = PyMem_Malloc(b->object ? b->object : 1);
            if (*owned == NULL) { PyErr_NoMemory(); return -1; }
            *object = into = *owned;
        }
        Py_ssize_t got = read_at(fd, into, b->object, b->at);
        if (got < 0) return -1;
        *length = (uint64_t)got;
    }
    return XXH3_64bits(*object, *length) == b->checksum;
}

/* Places `b`'s part of the file into `out` (file bytes, zeroed); 1 done, 0 mismatch, -1 error. */
static int place_block(const Block *b, uint64_t size, uint64_t block_size, unsigned char *out, PyObject *fds) {
    if (b->index > UINT64_MAX / (block_size ? block_size : 1)) return 0;
    uint64_t start = b->index * block_size;
    if (start >= size) return 1;
    uint64_t count = b->length < size - start ? b->length : size - start;
    if (count == 0) return 1;
    int direct = b->data == Py_None && b->offset == 0 && b->object == count;
    const unsigned char *object;
    unsigned char *owned = NULL;
    uint64_t length;
    int matched = object_of(b, fds, direct ? out + start : NULL, &object, &length, &owned);
    if (matched == 1 && (b->offset > length || length - b->offset < count)) matched = 0; /* at odds with itself */
    if (matched == 1 && !direct) memcpy(out + start, object + b->offset, count);
    PyMem_Free(owned);
    return matched;
}

/* The file's bytes; or, when an object does not match, the segment it came from (None for an
 * inline one) wrapped as a 1-tuple; NULL on error. */
static PyObject *assembled(PyObject *size_object, PyObject *block_size_object, PyObject *blocks, PyObject *fds) {
    uint64_t size = PyLong_AsUnsignedLongLong(size_object), block_size = PyLong_AsUnsignedLongLong(block_size_object);
    if (PyErr_Occurred()) return NULL;
    if (!PyTuple_Check(blocks) || !PyDict_Check(fds)) {
        PyErr_SetString(PyExc_TypeError, "blocks are a tuple, segment files a dict");
        return NULL;
    }
    if (size > PY_SSIZE_T_MAX) return PyErr_NoMemory();
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (out == NULL) return NULL;
    unsigned char *bytes = (unsigned char *)PyBytes_AS_STRING(out);
    Py_ssize_t count = PyTuple_GET_SIZE(blocks);
    if (count == 0) memset(bytes, 0, size);
    for (Py_ssize_t i = 0; i < count; i++) {
        Block b;
        int placed = parse_block(PyTuple_GET_ITEM(blocks, i), &b);
        if (placed == 0 && i == 0 && !(count == 1 && b.index == 0 && b.length >= size))
            memset(bytes, 0, size); /* holes read as zeros; a file of one whole object has none */
        if (placed == 0) placed = place_block(&b, size, block_size, bytes, fds);
        if (placed != 1) {
            Py_DECREF(out);
            return placed < 0 ? NULL : Py_BuildValue("(O)", b.segment);
        }
    }
    return out;
}

static PyObject *assemble(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (!arguments("assemble", nargs, 4)) return NULL;
    return assembled(args[0], args[1], args[2], args[3]);
}

/* The file's bytes by a kept answer, or None when it no longer holds (its stamp, or its bytes);
 * NULL on error. */
static PyObject *kept_bytes(PyObject *kept, PyObject *counters, PyObject *fds) {
    if (!PyTuple_Check(kept) || PyTuple_GET_SIZE(kept) != 5) {
        PyErr_SetString(PyExc_TypeError, "a kept answer is (size, block size, blocks, counters, values)");
        return NULL;
    }
    int shown = counters_show(counters, PyTuple_GET_ITEM(kept, 3), PyTuple_GET_ITEM(kept, 4));
    if (shown <= 0) return shown < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *data = assembled(PyTuple_GET_ITEM(kept, 0), PyTuple_GET_ITEM(kept, 1), PyTuple_GET_ITEM(kept, 2), fds);
    if (data == NULL || PyBytes_Check(data)) return data;
    Py_DECREF(data);
    Py_RETURN_NONE;
}

/* Keeps `answer` for `path` as the newest of `kept`, which holds at most `most` (the oldest go). */
static int hold(PyObject *kept, PyObject *path, PyObject *answer, Py_ssize_t most) {
    if (PyDict_SetItem(kept, path, answer) < 0) return -1;
    while (PyDict_GET_SIZE(kept) > most) {
        Py_ssize_t at = 0;
        PyObject *oldest, *value;
        if (!PyDict_Next(kept, &at, &oldest, &value)) break;
        Py_INCREF(oldest);
        int deleted = PyDict_DelItem(kept, oldest);
        Py_DECREF(oldest);
        if (deleted < 0) return -1;
    }
    return 0;
}

/* 1 when `kept` is a dict and `most_object` an int, stored in *most; 0 with an exception set. */
static int kept_arguments(PyObject *kept, PyObject *most_object, Py_ssize_t *most) {
    *most = PyLong_AsSsize_t(most_object);
    if (*most == -1 && PyErr_Occurred()) return 0;
    if (PyDict_Check(kept)) return 1;
    PyErr_SetString(PyExc_TypeError, "kept answers are a dict");
    return 0;
}

static PyObject *hold_answer(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t most;
    if (!arguments("hold", nargs, 4) || !kept_arguments(args[0], args[3], &most)) return NULL;
    if (hold(args[0], args[1], args[2], most) < 0) return NULL;
    Py_RETURN_NONE;
}

/* answer(kept, board, slots, ring_at, counters, fds, most, path): see aifs.client.answers. */
static PyObject *answer(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t most;
    if (!arguments("answer", nargs, 8) || !kept_arguments(args[0], args[6], &most)) return NULL;
    PyObject *kept = args[0], *path = args[7];
    PyObject *found = PyDict_GetItemWithError(kept, path);
    if (found == NULL && PyErr_Occurred()) return NULL;
    int posted = found == NULL;
    if (!posted) Py_INCREF(found);
    else if (args[1] == Py_None || (found = board_look(args[1], args[2], args[3], path)) == Py_None) {
        Py_XDECREF(found);
        Py_RETURN_NONE;
    }
    if (found == NULL) return NULL;
    PyObject *data = kept_bytes(found, args[4], args[5]), *result = NULL;
    if (data == Py_None && !posted && PyDict_DelItem(kept, path) < 0) Py_CLEAR(data);
    if (data == Py_None) result = Py_NewRef(Py_None);
    else if (data != NULL && (!posted || hold(kept, path, found, most) == 0))
        result = PyTuple_Pack(2, data, posted ? Py_True : Py_False);
    Py_XDECREF(data);
    Py_DECREF(found);
    return result;
}

static PyMethodDef methods[] = {
    {"look", (PyCFunction)(void (*)(void))look, METH_FASTCALL,
     "look(board, slots, ring_at, path): the kept answer of the newest whole record posted for path, or None"},
    {"shows", (PyCFunction)(void (*)(void))shows, METH_FASTCALL,
     "shows(counters, slots, values): whether the counters at slots still show values"},
    {"assemble", (PyCFunction)(void (*)(void))assemble, METH_FASTCALL,
     "assemble(size, block_size, blocks, fds): the file's bytes, or (segment,) of an object that does not match"},
    {"hold", (PyCFunction)(void (*)(void))hold_answer, METH_FASTCALL,
     "hold(kept, path, answer, most): keep answer for path as the newest; the oldest go past most"},
    {"answer", (PyCFunction)(void (*)(void))answer, METH_FASTCALL,
     "answer(kept, board, slots, ring_at, counters, fds, most, path): (bytes, posted) by a kept or posted answer, or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "aifs.bypass._reader",
    "The per-file work of a data socket reader: its answers, the board, the stamp check, the file's bytes.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__reader(void) { return PyModule_Create(&module); }
