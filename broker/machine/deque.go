package machine

// deque is a growable ring buffer whose size is a power of two (indexes
// wrap with a mask, not a division). The zero value is an empty deque.
type deque[T any] struct {
	buf  []T
	head int
	n    int
}

func (d *deque[T]) Len() int { return d.n }

func (d *deque[T]) grow() {
	size := len(d.buf) * 2
	if size == 0 {
		size = 16
	}
	nb := make([]T, size)
	for i := 0; i < d.n; i++ {
		nb[i] = d.buf[(d.head+i)&(len(d.buf)-1)]
	}
	d.buf, d.head = nb, 0
}

func (d *deque[T]) PushBack(v T) {
	if d.n == len(d.buf) {
		d.grow()
	}
	d.buf[(d.head+d.n)&(len(d.buf)-1)] = v
	d.n++
}

func (d *deque[T]) PushFront(v T) {
	if d.n == len(d.buf) {
		d.grow()
	}
	d.head = (d.head - 1) & (len(d.buf) - 1)
	d.buf[d.head] = v
	d.n++
}

// At returns the i'th element from the front; i must be in [0, Len).
func (d *deque[T]) At(i int) T { return d.buf[(d.head+i)&(len(d.buf)-1)] }

// Ptr returns a pointer to the i'th element, valid until the next mutation.
func (d *deque[T]) Ptr(i int) *T { return &d.buf[(d.head+i)&(len(d.buf)-1)] }

func (d *deque[T]) Front() T { return d.buf[d.head] }

func (d *deque[T]) PopFront() T {
	var zero T
	v := d.buf[d.head]
	d.buf[d.head] = zero
	d.head = (d.head + 1) & (len(d.buf) - 1)
	d.n--
	if d.n == 0 {
		d.head = 0
	}
	return v
}

func (d *deque[T]) PopBack() T {
	var zero T
	i := (d.head + d.n - 1) & (len(d.buf) - 1)
	v := d.buf[i]
	d.buf[i] = zero
	d.n--
	return v
}

// Insert puts v at index i (0 <= i <= Len), shifting later elements back.
func (d *deque[T]) Insert(i int, v T) {
	if i == 0 {
		d.PushFront(v)
		return
	}
	d.PushBack(v)
	for j := d.n - 1; j > i; j-- {
		*d.Ptr(j) = d.At(j - 1)
	}
	*d.Ptr(i) = v
}

// RemoveAt deletes the element at index i, keeping order.
func (d *deque[T]) RemoveAt(i int) T {
	v := d.At(i)
	for j := i; j < d.n-1; j++ {
		*d.Ptr(j) = d.At(j + 1)
	}
	d.PopBack()
	return v
}

// Clear empties the deque and returns how many elements it held.
func (d *deque[T]) Clear() int {
	n := d.n
	clear(d.buf)
	d.head, d.n = 0, 0
	return n
}
