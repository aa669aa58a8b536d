/* Exported dlsym of libvgpu.so; see dlsym_hook.c. */
#if defined(__x86_64__)
	.text
	.globl	dlsym
	.type	dlsym, @function
	.p2align 4
dlsym:
	cmpq	$-1, %rdi		/* RTLD_NEXT: glibc must see our caller */
	jne	1f
	movq	vgpu_real_dlsym_fn(%rip), %rax
	testq	%rax, %rax
	jz	1f
	jmp	*%rax
1:	jmp	vgpu_dlsym_c
	.size	dlsym, .-dlsym
#else
#error "libvgpu: dlsym_entry.S supports x86-64 only"
#endif
	.section .note.GNU-stack,"",@progbits
