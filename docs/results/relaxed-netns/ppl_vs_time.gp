set terminal pngcairo size 900,560 font 'sans,10'
set output "docs/results/relaxed-netns/ppl_vs_time.png"
set grid
set key top right
set logscale y
set ylabel 'validation perplexity (log scale)'
set xlabel 'training time (s)'
plot "docs/results/relaxed-netns/eval_0.dat" using 2:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid overlap=delayed compress=int8", "docs/results/relaxed-netns/eval_1.dat" using 2:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid overlap=delayed", "docs/results/relaxed-netns/eval_2.dat" using 2:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid compress=int8", "docs/results/relaxed-netns/eval_3.dat" using 2:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid", "docs/results/relaxed-netns/eval_4.dat" using 2:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid overlap=streaming:4 compress=int8", "docs/results/relaxed-netns/eval_5.dat" using 2:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid overlap=streaming:4"
unset output
set terminal svg size 900,560 font 'sans,10'
set output "docs/results/relaxed-netns/ppl_vs_time.svg"
set grid
set key top right
set logscale y
set ylabel 'validation perplexity (log scale)'
set xlabel 'training time (s)'
plot "docs/results/relaxed-netns/eval_0.dat" using 2:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid overlap=delayed compress=int8", "docs/results/relaxed-netns/eval_1.dat" using 2:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid overlap=delayed", "docs/results/relaxed-netns/eval_2.dat" using 2:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid compress=int8", "docs/results/relaxed-netns/eval_3.dat" using 2:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid", "docs/results/relaxed-netns/eval_4.dat" using 2:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid overlap=streaming:4 compress=int8", "docs/results/relaxed-netns/eval_5.dat" using 2:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid overlap=streaming:4"
unset output
