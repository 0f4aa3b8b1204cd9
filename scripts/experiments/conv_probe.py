# Probe: cuDNN conv 3x3 speed via torch, NCHW vs channels_last, at SD UNet/VAE shapes.
import torch, time
torch.backends.cudnn.benchmark = True
def t(fn, n=20):
    for _ in range(5): fn()
    torch.cuda.synchronize()
    s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n): fn()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / n
shapes = [(2,320,64,64,320),(2,640,32,32,640),(2,1280,16,16,1280),(2,1280,8,8,1280),(2,2560,8,8,1280),(2,960,64,64,320),
          (1,512,64,64,512),(1,512,128,128,512),(1,512,256,256,512),(1,256,512,512,256),(1,128,1024,1024,128),(1,256,1024,1024,128)]
for dt in (torch.float16, torch.bfloat16):
    for (n,c,h,w,co) in shapes:
        x = torch.randn(n,c,h,w,device='cuda',dtype=dt); wt = torch.randn(co,c,3,3,device='cuda',dtype=dt)
        f = 2*n*co*h*w*c*9
        a = t(lambda: torch.nn.functional.conv2d(x, wt, padding=1))
        xl = x.to(memory_format=torch.channels_last); wl = wt.to(memory_format=torch.channels_last)
        b = t(lambda: torch.nn.functional.conv2d(xl, wl, padding=1))
        tr = t(lambda: x.to(memory_format=torch.channels_last))
        print(f"{str(dt)[6:]:8} {n},{c},{h}x{w}->{co}: nchw {a*1e3:8.1f} us {f/a/1e9:6.0f} TF/s | nhwc {b*1e3:8.1f} us {f/b/1e9:6.0f} TF/s | transpose x {tr*1e3:7.1f} us")
